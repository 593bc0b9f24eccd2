// The Chrome trace of the cost model's schedule (see qbc/report/trace.h). The format:
// "Trace Event Format" (Google, the document chrome://tracing and Perfetto follow):
// complete events (ph "X": name, cat, ts, dur, pid, tid) and metadata events (ph "M":
// process_name / thread_name with args.name, and *_sort_index).
#include "qbc/report/trace.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace qbc::report {
namespace {

using Json = nlohmann::ordered_json;

constexpr int kCallsTid = isa::kNumQueues + 1;

int pid_of(int32_t core) { return core + 1; }
int tid_of(isa::Queue q) { return static_cast<int>(q) + 1; }

Json metadata(const char* name, int pid, int tid, const Json& args) {
  return Json{{"name", name}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", args}};
}

std::string node_name(const isa::Bundle& b, int32_t node) {
  return node >= 0 && static_cast<size_t>(node) < b.nodes.size()
             ? b.nodes[static_cast<size_t>(node)]
             : std::string("(no node)");
}

}  // namespace

StatusOr<std::vector<TraceCall>> trace_calls(const isa::Bundle& b, const isa::Mode& mode,
                                             const npu::CostParams& p) {
  std::vector<TraceCall> calls;
  const int64_t chunk =
      std::max<int64_t>(1, std::min({mode.prefill.max_seq, b.chunk, b.max_cache - 1}));
  double clock = 0;
  for (const isa::Phase phase : {isa::Phase::kPrefill, isa::Phase::kDecode}) {
    TraceCall c;
    c.phase = phase;
    c.name = phase == isa::Phase::kPrefill ? "prefill chunk" : "decode step";
    c.start = phase == isa::Phase::kPrefill ? 0 : chunk;
    c.seq = phase == isa::Phase::kPrefill ? chunk : 1;
    c.offset_s = clock;
    npu::CallSpec spec;
    spec.phase = phase;
    spec.start = c.start;
    spec.seq = c.seq;
    spec.per_node = false;
    spec.spans = true;
    QBC_ASSIGN_OR_RETURN(c.cost, npu::estimate_call(b, mode, spec, p));
    clock += c.cost.seconds;
    calls.push_back(std::move(c));
  }
  return calls;
}

std::string chrome_trace_json(const isa::Bundle& b, const isa::Mode& mode,
                              const std::vector<TraceCall>& calls, const TraceSource& source) {
  Json events = Json::array();
  const int32_t cores = mode.cores_per_instance;
  for (int32_t c = 0; c < cores; ++c) {
    const int pid = pid_of(c);
    events.push_back(metadata("process_name", pid, 0, {{"name", "core " + std::to_string(c)}}));
    events.push_back(metadata("process_sort_index", pid, 0, {{"sort_index", c}}));
    for (int q = 0; q < isa::kNumQueues; ++q) {
      const auto queue = static_cast<isa::Queue>(q);
      events.push_back(
          metadata("thread_name", pid, tid_of(queue), {{"name", isa::queue_name(queue)}}));
      events.push_back(metadata("thread_sort_index", pid, tid_of(queue), {{"sort_index", q + 1}}));
    }
    events.push_back(metadata("thread_name", pid, kCallsTid, {{"name", "calls"}}));
    events.push_back(metadata("thread_sort_index", pid, kCallsTid, {{"sort_index", 0}}));
  }
  for (const TraceCall& call : calls) {
    const double t0 = call.offset_s * 1e6;
    const char* cat = isa::phase_name(call.phase);
    for (size_t c = 0; c < call.cost.core_end_s.size(); ++c) {
      events.push_back(Json{{"name", call.name},
                            {"cat", cat},
                            {"ph", "X"},
                            {"ts", t0},
                            {"dur", call.cost.core_end_s[c] * 1e6},
                            {"pid", pid_of(static_cast<int32_t>(c))},
                            {"tid", kCallsTid},
                            {"args", {{"start", call.start}, {"tokens", call.seq}}}});
    }
    for (const npu::Span& s : call.cost.spans) {
      events.push_back(Json{{"name", s.op},
                            {"cat", cat},
                            {"ph", "X"},
                            {"ts", t0 + s.start * 1e6},
                            {"dur", std::max(0.0, s.end - s.start) * 1e6},
                            {"pid", pid_of(s.core)},
                            {"tid", tid_of(s.queue)},
                            {"args", {{"node", node_name(b, s.node)}}}});
    }
  }
  Json doc;
  doc["traceEvents"] = std::move(events);
  doc["displayTimeUnit"] = "ns";
  doc["otherData"] = {{"producer", source.producer},
                      {"times", source.times},
                      {"target", b.target},
                      {"scheme", isa::scheme_name(mode.scheme)}};
  return doc.dump() + "\n";
}

}  // namespace qbc::report
