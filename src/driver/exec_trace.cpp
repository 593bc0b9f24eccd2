// The executor's timeline as a Chrome trace (see qbc/driver/exec_trace.h): each recorded call
// becomes a report::TraceCall whose "cost" holds the measured spans, and report's writer
// lays it out exactly as it does the cost model's schedule.
#include "qbc/driver/exec_trace.h"

#include <algorithm>

#include "qbc/report/trace.h"

namespace qbc::driver {
namespace {

report::TraceCall trace_call(const runtime::ExecCall& e, int64_t decode_index) {
  report::TraceCall c;
  c.phase = e.phase;
  c.name = e.phase == isa::Phase::kPrefill ? "prefill chunk"
                                           : "decode step " + std::to_string(decode_index);
  c.start = e.start;
  c.seq = e.seq;
  c.offset_s = e.offset_s;
  c.cost.seconds = e.seconds;
  c.cost.core_end_s = e.core_end_s;
  for (double end : e.core_end_s) c.cost.core_seconds = std::max(c.cost.core_seconds, end);
  c.cost.spans.reserve(e.spans.size());
  for (const runtime::ExecSpan& s : e.spans)
    c.cost.spans.push_back(npu::Span{s.core, s.queue, s.node, s.op, s.start, s.end});
  return c;
}

}  // namespace

StatusOr<std::string> exec_trace_json(const isa::Bundle& b, const isa::Mode& mode,
                                      const runtime::ExecTrace& trace) {
  if (trace.calls.empty())
    return failed_precondition("the executor recorded no call to trace (no token was run)");
  std::vector<report::TraceCall> calls;
  int64_t decodes = 0;
  for (const runtime::ExecCall& e : trace.calls)
    calls.push_back(trace_call(e, e.phase == isa::Phase::kDecode ? ++decodes : 0));
  report::TraceSource source;
  source.producer = "qbc run --trace (executor)";
  source.times =
      "measured host-executor times: the CPU executor's steady clock around every "
      "instruction (queues of a core run one after another), not NPU cycles";
  return report::chrome_trace_json(b, mode, calls, source);
}

ExecTraceSummary summarize(const runtime::ExecTrace& trace) {
  ExecTraceSummary s;
  int64_t decodes = 0;
  double decode_s = 0;
  for (const runtime::ExecCall& c : trace.calls) {
    ++s.calls;
    s.spans += c.spans.size();
    if (c.phase == isa::Phase::kPrefill) {
      s.prefill_us = c.seconds * 1e6;
    } else {
      ++decodes;
      decode_s += c.seconds;
    }
  }
  if (decodes > 0) s.decode_mean_us = decode_s / static_cast<double>(decodes) * 1e6;
  return s;
}

}  // namespace qbc::driver
