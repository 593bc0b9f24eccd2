// The cost model (see qbc/npu/cost_model.h): a timed replay of the emitted streams. Each
// core's stream is walked in program order (the executor's schedule); every instruction
// starts when its queue is free and the tokens it waits for have been signalled, and takes
// the time of its busiest resource plus its issue time. Cores meet at barriers.
#include "qbc/npu/cost_model.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <type_traits>
#include <variant>

#include "qbc/support/saturating.h"

namespace qbc::npu {
namespace {

using isa::Expr;
using isa::Instr;

/// Work of one instruction: the counts it adds and the seconds of each resource.
struct Work {
  int64_t read = 0, written = 0;  ///< DRAM bytes
  int purpose = 0;
  int64_t macs = 0, vector_ops = 0;
  double mac_rate = 1;  ///< MACs per second for this instruction's operand types
  bool dma = false;
};

int64_t group_size(const isa::AttnDesc& d) { return d.kv_heads > 0 ? d.heads / d.kv_heads : 1; }

const isa::AttnDesc* attn(const isa::Bundle& b, int32_t i) {
  return i >= 0 && static_cast<size_t>(i) < b.attentions.size()
             ? &b.attentions[static_cast<size_t>(i)]
             : nullptr;
}

class Walker {
 public:
  Walker(const isa::Bundle& b, const CostParams& p) : b_(b), p_(p) {}

  double mac_rate(double per_cycle) const {
    return std::max(per_cycle, 1e-9) * p_.clock_hz * p_.mac_efficiency;
  }

  /// The counts of `in` with the runtime values of `env` (the executor's definitions,
  /// runtime::CoreCounters).
  Status work(const Instr& in, const isa::Env& env, Work* w) const {
    auto count = [&](const Expr& e, const char* what) -> StatusOr<int64_t> {
      const int64_t v = e.eval(env);
      if (v < 0) return invalid_argument(what, " is ", v, " (negative)");
      return v;
    };
    const double int8 = mac_rate(p_.int8_macs_per_cycle);
    return std::visit(
        [&](const auto& op) -> Status {
          using T = std::decay_t<decltype(op)>;
          if constexpr (std::is_same_v<T, isa::Dma>) {
            w->dma = true;
            QBC_ASSIGN_OR_RETURN(const int64_t rows, count(op.rows, "rows"));
            if (op.src.buffer < 0 || op.dst.buffer < 0 ||
                static_cast<size_t>(std::max(op.src.buffer, op.dst.buffer)) >= b_.buffers.size())
              return invalid_argument("dma buffer out of range");
            const isa::Buffer& src = b_.buffers[static_cast<size_t>(op.src.buffer)];
            const bool load = src.space == isa::Space::kDram;
            const isa::Buffer& dram = load ? src : b_.buffers[static_cast<size_t>(op.dst.buffer)];
            w->purpose = static_cast<int>(dram.purpose);
            const int64_t bytes = rows == 0 || op.row_bytes == 0 ? 0 : span(rows, op.row_bytes);
            (load ? w->read : w->written) = bytes;
          } else if constexpr (std::is_same_v<T, isa::Quantize>) {
            QBC_ASSIGN_OR_RETURN(const int64_t rows, count(op.rows, "rows"));
            w->vector_ops = span(rows, op.k);
          } else if constexpr (std::is_same_v<T, isa::MatMul>) {
            QBC_ASSIGN_OR_RETURN(const int64_t rows, count(op.rows, "rows"));
            w->macs = span(rows, op.n, op.kt);
            w->mac_rate = op.xtype == isa::DType::kI16  ? mac_rate(p_.int16_macs_per_cycle)
                          : op.wtype == isa::DType::kI4 ? mac_rate(p_.int4_macs_per_cycle)
                                                        : int8;
          } else if constexpr (std::is_same_v<T, isa::Requant>) {
            QBC_ASSIGN_OR_RETURN(const int64_t rows, count(op.rows, "rows"));
            w->vector_ops = span(rows, op.n, op.gt);
          } else if constexpr (std::is_same_v<T, isa::RmsNorm>) {
            QBC_ASSIGN_OR_RETURN(const int64_t rows, count(op.rows, "rows"));
            w->vector_ops = span(rows, op.width);
          } else if constexpr (std::is_same_v<T, isa::Rope>) {
            QBC_ASSIGN_OR_RETURN(const int64_t rows, count(op.rows, "rows"));
            if (op.rope < 0 || static_cast<size_t>(op.rope) >= b_.ropes.size())
              return invalid_argument("rope index out of range");
            const isa::RopeDesc& r = b_.ropes[static_cast<size_t>(op.rope)];
            w->vector_ops = span(rows, r.heads, r.head_dim);
          } else if constexpr (std::is_same_v<T, isa::Eltwise>) {
            QBC_ASSIGN_OR_RETURN(const int64_t rows, count(op.rows, "rows"));
            w->vector_ops = span(rows, op.width);
          } else if constexpr (std::is_same_v<T, isa::Fill>) {
            QBC_ASSIGN_OR_RETURN(const int64_t n, count(op.count, "count"));
            w->vector_ops = n;
          } else if constexpr (std::is_same_v<T, isa::Merge>) {
            w->vector_ops = span(op.parts_count, op.count);
          } else if constexpr (std::is_same_v<T, isa::Loop> || std::is_same_v<T, isa::Barrier>) {
            // no work
          } else {
            const isa::AttnDesc* d = attn(b_, op.attn);
            if (d == nullptr) return invalid_argument("attention index out of range");
            QBC_ASSIGN_OR_RETURN(const int64_t rows, count(op.rows, "rows"));
            const int64_t g = group_size(*d), hd = d->head_dim;
            if constexpr (std::is_same_v<T, isa::KvQuant>) {
              w->vector_ops = span(rows, 2, d->kv_heads * hd);
            } else if constexpr (std::is_same_v<T, isa::QueryPrep>) {
              w->vector_ops = span(rows, g, hd);
            } else if constexpr (std::is_same_v<T, isa::QkScores>) {
              w->macs = span(rows, g, op.bc, hd);
              w->vector_ops = span(rows, g, op.bc);
              w->mac_rate = d->k_bits > 8 ? mac_rate(p_.int16_macs_per_cycle) : int8;
            } else if constexpr (std::is_same_v<T, isa::ExpAccum>) {
              w->macs = span(rows, g, op.bc, hd);
              w->vector_ops = span(rows, g, op.bc);
              w->mac_rate = d->v_bits > 8 ? mac_rate(p_.int16_macs_per_cycle) : int8;
            } else {
              static_assert(std::is_same_v<T, isa::AttnOut>, "an isa::Op the cost model misses");
              w->vector_ops = span(rows, g, hd);
            }
          }
          return ok_status();
        },
        in.op);
  }

  const isa::Bundle& b_;
  const CostParams& p_;
};

/// One core's replay state.
struct CoreSim {
  const std::vector<Instr>* code = nullptr;
  size_t pc = 0;
  struct Frame {
    int32_t var;
    int64_t trip, iter;
    size_t begin, end;
  };
  std::vector<Frame> loops;
  isa::Env env;
  double qfree[isa::kNumQueues] = {0, 0, 0};
  std::deque<double> tokens[isa::kNumChannels];
  CostCounts counts;
  double busy_dram = 0, busy_mac = 0, busy_vec = 0, busy_lat = 0;
  bool done = false;

  void close_loops() {
    while (!loops.empty() && pc == loops.back().end) {
      Frame& f = loops.back();
      if (++f.iter < f.trip) {
        env.loop[static_cast<size_t>(f.var)] = f.iter;
        pc = f.begin;
        return;
      }
      loops.pop_back();
    }
  }
  double last = 0;  ///< the latest end of any instruction (a DMA's data arrives after qfree)
  /// The last node with instructions on this core: the wall time of an instruction of no
  /// node (a token carrier between two nodes) counts towards it.
  int32_t time_node = -1;
  int32_t time_node_of(int32_t node) {
    if (node >= 0) time_node = node;
    return time_node;
  }
  double end_time() const { return std::max({qfree[0], qfree[1], qfree[2], last}); }
};

Bound pick_bound(double dram, double mac, double vec, double total) {
  return bound_of(dram, mac, vec, total);
}

}  // namespace

Bound bound_of(double dram, double mac, double vec, double total) {
  const double top = std::max({dram, mac, vec});
  if (total <= 0 || top < 0.5 * total) return Bound::kLatency;
  if (top == dram) return Bound::kDram;
  return top == mac ? Bound::kMac : Bound::kVector;
}

int64_t CostCounts::dram_bytes() const {
  int64_t s = 0;
  for (int i = 0; i < kPurposes; ++i) s += dram_read[i] + dram_written[i];
  return s;
}

CostCounts& CostCounts::operator+=(const CostCounts& o) {
  for (int i = 0; i < kPurposes; ++i) {
    dram_read[i] += o.dram_read[i];
    dram_written[i] += o.dram_written[i];
  }
  macs += o.macs;
  vector_ops += o.vector_ops;
  barriers += o.barriers;
  instructions += o.instructions;
  dma += o.dma;
  return *this;
}

const char* bound_name(Bound b) {
  switch (b) {
    case Bound::kDram:
      return "dram";
    case Bound::kMac:
      return "mac";
    case Bound::kVector:
      return "vector";
    case Bound::kLatency:
      return "latency";
  }
  return "?";
}

StatusOr<CallCost> estimate_call(const isa::Bundle& b, const isa::Mode& mode, const CallSpec& spec,
                                 const CostParams& p) {
  const isa::Program& prog = spec.phase == isa::Phase::kPrefill ? mode.prefill : mode.decode;
  if (spec.seq < 1 || spec.seq > prog.max_seq || spec.start < 0 ||
      spec.start + spec.seq > b.max_cache) {
    return invalid_argument("cost model: ", isa::phase_name(spec.phase), " call with start ",
                            spec.start, " and ", spec.seq, " tokens is outside the program (",
                            prog.max_seq, " tokens a call, cache ", b.max_cache, ")");
  }
  const Walker walker(b, p);
  const size_t P = prog.cores.size();
  const int sharers = std::max(1, static_cast<int>(P) * std::max(1, spec.active_instances));
  const double dram_rate = p.dram_bytes_per_s * p.dram_efficiency;
  const double core_rate = dram_rate / sharers;
  const double vec_rate = std::max(p.vector_ops_per_cycle, 1e-9) * p.clock_hz;
  const double issue = p.issue_cycles / p.clock_hz;

  std::vector<CoreSim> sims(P);
  int32_t max_var = 0;
  for (size_t c = 0; c < P; ++c) {
    sims[c].code = &prog.cores[c].code;
    for (const Instr& in : *sims[c].code) {
      if (const auto* l = std::get_if<isa::Loop>(&in.op)) max_var = std::max(max_var, l->var + 1);
    }
  }
  for (CoreSim& s : sims) {
    s.env.loop.assign(static_cast<size_t>(max_var), 0);
    s.env.sym[static_cast<int>(isa::Sym::kStart)] = spec.start;
    s.env.sym[static_cast<int>(isa::Sym::kSeq)] = spec.seq;
    s.env.sym[static_cast<int>(isa::Sym::kSlot)] = spec.slot;
  }
  // Per node: counts, busy time by resource per core, and when each core ended its work.
  struct NodeAcc {
    CostCounts counts;
    std::vector<double> dram, mac, vec, lat, end;
    int64_t first = 0;  ///< order of first appearance
  };
  std::map<int32_t, NodeAcc> nodes;
  std::vector<Span> spans;
  int64_t order = 0;
  auto node_acc = [&](int32_t node) -> NodeAcc& {
    auto [it, fresh] = nodes.try_emplace(node);
    if (fresh) {
      for (auto* v :
           {&it->second.dram, &it->second.mac, &it->second.vec, &it->second.lat, &it->second.end})
        v->assign(P, 0.0);
      it->second.first = order++;
    }
    return it->second;
  };

  // Runs core c up to its next barrier (returned) or its end (nullptr).
  auto run = [&](size_t c, const Instr** barrier) -> Status {
    CoreSim& s = sims[c];
    *barrier = nullptr;
    for (;;) {
      s.close_loops();
      if (s.pc >= s.code->size()) {
        s.done = true;
        return ok_status();
      }
      const size_t pc = s.pc;
      const Instr& in = (*s.code)[pc];
      ++s.counts.instructions;
      if (const auto* loop = std::get_if<isa::Loop>(&in.op)) {
        const int64_t trip = loop->trip.eval(s.env);
        const size_t end = pc + 1 + static_cast<size_t>(std::max(loop->body, 0));
        if (loop->var < 0 || loop->var >= max_var || end > s.code->size())
          return invalid_argument("core ", c, " instr ", pc, ": malformed loop");
        if (trip <= 0 || loop->body == 0) {
          s.pc = end;
          continue;
        }
        s.loops.push_back(CoreSim::Frame{loop->var, trip, 0, pc + 1, end});
        s.env.loop[static_cast<size_t>(loop->var)] = 0;
        s.pc = pc + 1;
        continue;
      }
      const int q = static_cast<int>(in.queue);
      if (q < 0 || q >= isa::kNumQueues)
        return invalid_argument("core ", c, " instr ", pc, ": bad queue");
      double ready = s.qfree[q];
      for (int ch = 0; ch < isa::kNumChannels; ++ch) {
        if ((in.wait >> ch & 1) == 0) continue;
        if (s.tokens[ch].empty()) {
          return invalid_argument("core ", c, " instr ", pc, " (", isa::op_name(in.op),
                                  ") waits on ", isa::channel_name(static_cast<isa::Channel>(ch)),
                                  " before any signal");
        }
        ready = std::max(ready, s.tokens[ch].front());
        s.tokens[ch].pop_front();
      }
      if (std::holds_alternative<isa::Barrier>(in.op)) {
        ++s.counts.barriers;
        s.qfree[q] = ready;  // the release time is set when every core has arrived
        s.pc = pc + 1;
        *barrier = &in;
        return ok_status();
      }
      Work w;
      Status st = walker.work(in, s.env, &w);
      if (!st.ok()) {
        return st.with_context("core " + std::to_string(c) + " instr " + std::to_string(pc) + " (" +
                               isa::op_name(in.op) + ")");
      }
      const double t_dram = w.dma ? static_cast<double>(w.read + w.written) / core_rate : 0.0;
      const double t_mac = static_cast<double>(w.macs) / w.mac_rate;
      const double t_vec = static_cast<double>(w.vector_ops) / vec_rate;
      // A queue issues its next instruction once this one has its resource; a DMA's
      // latency is pipelined (the next DMA starts while this one's first bytes are in
      // flight), so it delays only what waits for this DMA's data.
      const double t_lat = issue + (w.dma ? p.dma_latency_s : 0.0);
      const double busy = std::max({t_dram, t_mac, t_vec}) + issue;
      const double end = ready + busy + (w.dma ? p.dma_latency_s : 0.0);
      s.qfree[q] = ready + busy;
      s.last = std::max(s.last, end);
      if (spec.spans)
        spans.push_back(Span{static_cast<int32_t>(c), in.queue, in.node, isa::op_name(in.op), ready,
                             ready + busy});
      for (int ch = 0; ch < isa::kNumChannels; ++ch)
        if ((in.signal >> ch & 1) != 0) s.tokens[ch].push_back(end);
      if (w.dma) {
        ++s.counts.dma;
        s.counts.dram_read[w.purpose] += w.read;
        s.counts.dram_written[w.purpose] += w.written;
      }
      s.counts.macs += w.macs;
      s.counts.vector_ops += w.vector_ops;
      s.busy_dram += t_dram;
      s.busy_mac += t_mac;
      s.busy_vec += t_vec;
      s.busy_lat += t_lat;
      if (spec.per_node) {
        NodeAcc& a = node_acc(in.node);
        if (w.dma) {
          ++a.counts.dma;
          a.counts.dram_read[w.purpose] += w.read;
          a.counts.dram_written[w.purpose] += w.written;
        }
        ++a.counts.instructions;
        a.counts.macs += w.macs;
        a.counts.vector_ops += w.vector_ops;
        a.dram[c] += t_dram;
        a.mac[c] += t_mac;
        a.vec[c] += t_vec;
        a.lat[c] += t_lat;
        NodeAcc& t = node_acc(s.time_node_of(in.node));
        t.end[c] = std::max(t.end[c], end);
      }
      s.pc = pc + 1;
    }
  };

  for (;;) {
    std::vector<const Instr*> at(P, nullptr);
    size_t arrived = 0, finished = 0;
    for (size_t c = 0; c < P; ++c) {
      if (sims[c].done) {
        ++finished;
        continue;
      }
      QBC_RETURN_IF_ERROR(run(c, &at[c]));
      if (at[c] != nullptr) {
        ++arrived;
      } else {
        ++finished;
      }
    }
    if (arrived == 0) break;
    if (finished > 0) {
      return invalid_argument("cost model: ", isa::phase_name(spec.phase),
                              " program: cores pass different numbers of barriers");
    }
    double release = 0;
    for (size_t c = 0; c < P; ++c)
      release = std::max(release, sims[c].qfree[static_cast<int>(at[c]->queue)]);
    release += p.barrier_s;
    for (size_t c = 0; c < P; ++c) {
      CoreSim& s = sims[c];
      const int q = static_cast<int>(at[c]->queue);
      s.busy_lat += release - s.qfree[q] > 0 ? p.barrier_s : 0.0;
      if (spec.spans) {
        spans.push_back(Span{static_cast<int32_t>(c), at[c]->queue, at[c]->node,
                             isa::op_name(at[c]->op), s.qfree[q], release});
      }
      s.qfree[q] = release;
      for (int ch = 0; ch < isa::kNumChannels; ++ch)
        if ((at[c]->signal >> ch & 1) != 0) s.tokens[ch].push_back(release);
      if (spec.per_node) {
        NodeAcc& a = node_acc(s.time_node_of(at[c]->node));
        a.end[c] = std::max(a.end[c], release);
      }
    }
  }

  CallCost out;
  size_t slowest = 0;
  for (size_t c = 0; c < P; ++c) {
    out.cores.push_back(sims[c].counts);
    out.total += sims[c].counts;
    out.core_end_s.push_back(sims[c].end_time());
    if (sims[c].end_time() > sims[slowest].end_time()) slowest = c;
  }
  out.core_seconds = P > 0 ? sims[slowest].end_time() : 0.0;
  out.host_seconds = p.host_s;
  out.seconds = out.core_seconds + out.host_seconds;
  out.dram_seconds = static_cast<double>(out.total.dram_bytes()) /
                     (dram_rate / std::max(1, spec.active_instances));
  if (P > 0) {
    const CoreSim& s = sims[slowest];
    out.bound = pick_bound(s.busy_dram, s.busy_mac, s.busy_vec, out.core_seconds);
    out.busy_dram_s = s.busy_dram;
    out.busy_mac_s = s.busy_mac;
    out.busy_vector_s = s.busy_vec;
  }
  out.spans = std::move(spans);
  if (spec.per_node) {
    std::vector<std::pair<int64_t, int32_t>> by_order;
    for (const auto& [node, a] : nodes) by_order.push_back({a.first, node});
    std::sort(by_order.begin(), by_order.end());
    double prev_end = 0;
    for (const auto& [ord, node] : by_order) {
      const NodeAcc& a = nodes.at(node);
      NodeCost nc;
      nc.node = node;
      nc.counts = a.counts;
      double end = 0;
      for (size_t c = 0; c < P; ++c) {
        nc.dram_s = std::max(nc.dram_s, a.dram[c]);
        nc.mac_s = std::max(nc.mac_s, a.mac[c]);
        nc.vector_s = std::max(nc.vector_s, a.vec[c]);
        nc.latency_s = std::max(nc.latency_s, a.lat[c]);
        end = std::max(end, a.end[c]);
      }
      nc.seconds = std::max(0.0, end - prev_end);
      prev_end = std::max(prev_end, end);
      nc.bound = pick_bound(nc.dram_s, nc.mac_s, nc.vector_s,
                            std::max(nc.seconds, nc.dram_s + nc.latency_s));
      out.nodes.push_back(std::move(nc));
    }
  }
  return out;
}

StatusOr<ModePrediction> predict_mode(const isa::Bundle& b, const isa::Mode& mode,
                                      int64_t prompt_tokens, const CostParams& p,
                                      int active_instances) {
  if (prompt_tokens < 1 || prompt_tokens >= b.max_cache) {
    return invalid_argument("--prompt-tokens ", prompt_tokens, " must be in [1, ", b.max_cache - 1,
                            "] (the cache holds ", b.max_cache, " positions)");
  }
  ModePrediction r;
  r.scheme = mode.scheme;
  r.prompt_tokens = prompt_tokens;
  const int64_t chunk = std::max<int64_t>(1, mode.prefill.max_seq);
  double prefill_dram = 0, prefill_mac = 0, prefill_vec = 0, prefill_core = 0;
  for (int64_t s = 0; s < prompt_tokens; s += chunk) {
    CallSpec cs;
    cs.phase = isa::Phase::kPrefill;
    cs.start = s;
    cs.seq = std::min(chunk, prompt_tokens - s);
    cs.per_node = false;
    cs.active_instances = active_instances;
    QBC_ASSIGN_OR_RETURN(CallCost c, estimate_call(b, mode, cs, p));
    r.ttft_s += c.seconds;
    prefill_core += c.core_seconds;
    prefill_dram += c.dram_seconds;
    double mac = 0, vec = 0;
    for (const CostCounts& k : c.cores) {
      mac = std::max(mac, static_cast<double>(k.macs));
      vec = std::max(vec, static_cast<double>(k.vector_ops));
    }
    prefill_mac += mac / (std::max(p.int8_macs_per_cycle, 1e-9) * p.clock_hz * p.mac_efficiency);
    prefill_vec += vec / (std::max(p.vector_ops_per_cycle, 1e-9) * p.clock_hz);
  }
  r.prefill_bound = pick_bound(prefill_dram, prefill_mac, prefill_vec, prefill_core);
  r.prefill_dram_s = prefill_dram;
  r.prefill_mac_s = prefill_mac;
  r.prefill_vector_s = prefill_vec;
  r.prefill_core_s = prefill_core;
  CallSpec d;
  d.phase = isa::Phase::kDecode;
  d.start = prompt_tokens;
  d.active_instances = active_instances;
  QBC_ASSIGN_OR_RETURN(r.decode, estimate_call(b, mode, d, p));
  r.decode_s = r.decode.seconds;
  r.bound = r.decode.bound;
  d.start = b.max_cache - 1;
  d.per_node = false;
  QBC_ASSIGN_OR_RETURN(CallCost end, estimate_call(b, mode, d, p));
  r.decode_end_s = end.seconds;
  // The unavoidable traffic of the step: every weight once, the visible KV read and this
  // position's KV written, at the effective bandwidth.
  double need =
      static_cast<double>(r.decode.total.dram_read[static_cast<int>(isa::Purpose::kWeights)]);
  for (const isa::AttnDesc& a : b.attentions) {
    const int64_t pos = prompt_tokens + 1;
    const int64_t visible = a.window > 0 ? std::min(a.window, pos) : pos;
    const int64_t row = isa::dtype_bytes(isa::code_type(a.k_bits), a.head_dim) +
                        isa::dtype_bytes(isa::code_type(a.v_bits), a.head_dim);
    need += static_cast<double>(a.kv_heads * row * (visible + 1));
  }
  const double need_s =
      need * std::max(1, active_instances) / (p.dram_bytes_per_s * p.dram_efficiency);
  r.need_s = need_s;
  r.roofline_fraction = r.decode_s > 0 ? need_s / r.decode_s : 0.0;
  return r;
}

std::string cost_node_label(const isa::Bundle& b, int32_t node) {
  if (node >= 0 && static_cast<size_t>(node) < b.nodes.size())
    return b.nodes[static_cast<size_t>(node)];
  return "(token carriers, npu-deps)";
}

std::string cost_table_text(const isa::Bundle& b, const CallCost& c, size_t max_rows) {
  std::string out;
  char line[256];
  auto row = [&](const std::string& name, const CostCounts& k, double seconds, Bound bound) {
    std::snprintf(line, sizeof(line), "  %-34s %10.3f %10.3f %10.1f %8.1f  %s\n", name.c_str(),
                  static_cast<double>(k.dram_bytes()) / (1024.0 * 1024.0),
                  static_cast<double>(k.macs) / 1e6, static_cast<double>(k.vector_ops) / 1e3,
                  seconds * 1e6, bound_name(bound));
    out += line;
  };
  std::snprintf(line, sizeof(line), "  %-34s %10s %10s %10s %8s  %s\n", "node", "DRAM MiB", "MMACs",
                "kvec", "us", "bound");
  out += line;
  std::vector<const NodeCost*> rows;
  for (const NodeCost& n : c.nodes) rows.push_back(&n);
  if (max_rows > 0 && rows.size() > max_rows) {
    std::stable_sort(rows.begin(), rows.end(),
                     [](const NodeCost* x, const NodeCost* y) { return x->seconds > y->seconds; });
    rows.resize(max_rows);
  }
  for (const NodeCost* n : rows) row(cost_node_label(b, n->node), n->counts, n->seconds, n->bound);
  // The whole call: every core's counts, the slowest core's time, then the host's share.
  row("total", c.total, c.core_seconds, c.bound);
  std::snprintf(line, sizeof(line),
                "  (total: every core's counts and the slowest core's time; with %.1f us of host "
                "overhead the call takes %.1f us)\n",
                c.host_seconds * 1e6, c.seconds * 1e6);
  out += line;
  return out;
}

}  // namespace qbc::npu
