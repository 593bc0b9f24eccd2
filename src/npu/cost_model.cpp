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
          } else if constexpr (std::is_same_v<T, isa::LayerNorm>) {
            // Counted like rms_norm: one vector op per element (the reductions pipeline).
            QBC_ASSIGN_OR_RETURN(const int64_t rows, count(op.rows, "rows"));
            w->vector_ops = span(rows, op.width);
          } else if constexpr (std::is_same_v<T, isa::Rope>) {
            QBC_ASSIGN_OR_RETURN(const int64_t rows, count(op.rows, "rows"));
            if (op.rope < 0 || static_cast<size_t>(op.rope) >= b_.ropes.size())
              return invalid_argument("rope index out of range");
            const isa::RopeDesc& r = b_.ropes[static_cast<size_t>(op.rope)];
            w->vector_ops = span(rows, r.heads, r.head_dim);
          } else if constexpr (std::is_same_v<T, isa::RopeTable>) {
            QBC_ASSIGN_OR_RETURN(const int64_t rows, count(op.rows, "rows"));
            w->vector_ops = span(rows, op.heads, op.head_dim);
          } else if constexpr (std::is_same_v<T, isa::AvgPool>) {
            // One vector op per input element (the sums); the division pipelines.
            QBC_ASSIGN_OR_RETURN(const int64_t rows, count(op.rows, "rows"));
            w->vector_ops = span(rows, static_cast<int64_t>(op.kernel) * op.kernel, op.width);
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

namespace {

/// One call's timed replay (estimate_call): the cores run to their next barrier in turn,
/// the barrier releases them all, until every stream has ended.
class CallReplay {
 public:
  CallReplay(const isa::Bundle& b, const isa::Program& prog, const CallSpec& spec,
             const CostParams& p)
      : prog_(prog),
        spec_(spec),
        p_(p),
        walker_(b, p),
        P_(prog.cores.size()),
        dram_rate_(p.dram_bytes_per_s * p.dram_efficiency),
        core_rate_(dram_rate_ /
                   std::max(1, static_cast<int>(P_) * std::max(1, spec.active_instances))),
        vec_rate_(std::max(p.vector_ops_per_cycle, 1e-9) * p.clock_hz),
        issue_(p.issue_cycles / p.clock_hz) {}

  Status run();
  CallCost result();

 private:
  /// Per node: counts, busy time by resource per core, and when each core ended its work.
  struct NodeAcc {
    CostCounts counts;
    std::vector<double> dram, mac, vec, lat, end;
    int64_t first = 0;  ///< order of first appearance
  };

  void start();
  NodeAcc& node_acc(int32_t node);
  /// Runs core c up to its next barrier (returned) or its end (nullptr).
  Status run_core(size_t c, const Instr** barrier);
  /// Enters or skips the loop at the core's pc.
  Status enter_loop(size_t c, const isa::Loop& loop);
  /// When `in` may start on its queue: the queue free and its awaited tokens signalled.
  StatusOr<double> ready_time(size_t c, const Instr& in);
  /// Times and counts the work `w` of `in`, ready at `ready`.
  void execute(size_t c, const Instr& in, double ready, const Work& w);
  /// Releases every core from the barriers `at` they wait at.
  void release(const std::vector<const Instr*>& at);
  void node_costs(CallCost* out) const;

  const isa::Program& prog_;
  const CallSpec& spec_;
  const CostParams& p_;
  const Walker walker_;
  const size_t P_;
  const double dram_rate_, core_rate_, vec_rate_, issue_;
  std::vector<CoreSim> sims_;
  int32_t max_var_ = 0;
  std::map<int32_t, NodeAcc> nodes_;
  std::vector<Span> spans_;
  int64_t order_ = 0;
};

void CallReplay::start() {
  sims_.resize(P_);
  for (size_t c = 0; c < P_; ++c) {
    sims_[c].code = &prog_.cores[c].code;
    for (const Instr& in : *sims_[c].code) {
      if (const auto* l = std::get_if<isa::Loop>(&in.op)) max_var_ = std::max(max_var_, l->var + 1);
    }
  }
  for (CoreSim& s : sims_) {
    s.env.loop.assign(static_cast<size_t>(max_var_), 0);
    s.env.sym[static_cast<int>(isa::Sym::kStart)] = spec_.start;
    s.env.sym[static_cast<int>(isa::Sym::kSeq)] = spec_.seq;
    s.env.sym[static_cast<int>(isa::Sym::kSlot)] = spec_.slot;
  }
}

CallReplay::NodeAcc& CallReplay::node_acc(int32_t node) {
  auto [it, fresh] = nodes_.try_emplace(node);
  if (fresh) {
    for (auto* v :
         {&it->second.dram, &it->second.mac, &it->second.vec, &it->second.lat, &it->second.end})
      v->assign(P_, 0.0);
    it->second.first = order_++;
  }
  return it->second;
}

Status CallReplay::enter_loop(size_t c, const isa::Loop& loop) {
  CoreSim& s = sims_[c];
  const size_t pc = s.pc;
  const int64_t trip = loop.trip.eval(s.env);
  const size_t end = pc + 1 + static_cast<size_t>(std::max(loop.body, 0));
  if (loop.var < 0 || loop.var >= max_var_ || end > s.code->size())
    return invalid_argument("core ", c, " instr ", pc, ": malformed loop");
  if (trip <= 0 || loop.body == 0) {
    s.pc = end;
    return ok_status();
  }
  s.loops.push_back(CoreSim::Frame{loop.var, trip, 0, pc + 1, end});
  s.env.loop[static_cast<size_t>(loop.var)] = 0;
  s.pc = pc + 1;
  return ok_status();
}

StatusOr<double> CallReplay::ready_time(size_t c, const Instr& in) {
  CoreSim& s = sims_[c];
  const int q = static_cast<int>(in.queue);
  if (q < 0 || q >= isa::kNumQueues)
    return invalid_argument("core ", c, " instr ", s.pc, ": bad queue");
  double ready = s.qfree[q];
  for (int ch = 0; ch < isa::kNumChannels; ++ch) {
    if ((in.wait >> ch & 1) == 0) continue;
    if (s.tokens[ch].empty()) {
      return invalid_argument("core ", c, " instr ", s.pc, " (", isa::op_name(in.op), ") waits on ",
                              isa::channel_name(static_cast<isa::Channel>(ch)),
                              " before any signal");
    }
    ready = std::max(ready, s.tokens[ch].front());
    s.tokens[ch].pop_front();
  }
  return ready;
}

void CallReplay::execute(size_t c, const Instr& in, double ready, const Work& w) {
  CoreSim& s = sims_[c];
  const int q = static_cast<int>(in.queue);
  const double t_dram = w.dma ? static_cast<double>(w.read + w.written) / core_rate_ : 0.0;
  const double t_mac = static_cast<double>(w.macs) / w.mac_rate;
  const double t_vec = static_cast<double>(w.vector_ops) / vec_rate_;
  // A queue issues its next instruction once this one has its resource; a DMA's latency is
  // pipelined (the next DMA starts while this one's first bytes are in flight), so it
  // delays only what waits for this DMA's data.
  const double t_lat = issue_ + (w.dma ? p_.dma_latency_s : 0.0);
  const double busy = std::max({t_dram, t_mac, t_vec}) + issue_;
  const double end = ready + busy + (w.dma ? p_.dma_latency_s : 0.0);
  s.qfree[q] = ready + busy;
  s.last = std::max(s.last, end);
  if (spec_.spans)
    spans_.push_back(
        Span{static_cast<int32_t>(c), in.queue, in.node, isa::op_name(in.op), ready, ready + busy});
  for (int ch = 0; ch < isa::kNumChannels; ++ch)
    if ((in.signal >> ch & 1) != 0) s.tokens[ch].push_back(end);
  for (CostCounts* k : {&s.counts, spec_.per_node ? &node_acc(in.node).counts : nullptr}) {
    if (k == nullptr) continue;
    if (w.dma) {
      ++k->dma;
      k->dram_read[w.purpose] += w.read;
      k->dram_written[w.purpose] += w.written;
    }
    k->macs += w.macs;
    k->vector_ops += w.vector_ops;
  }
  s.busy_dram += t_dram;
  s.busy_mac += t_mac;
  s.busy_vec += t_vec;
  s.busy_lat += t_lat;
  if (!spec_.per_node) return;
  NodeAcc& a = node_acc(in.node);
  ++a.counts.instructions;
  a.dram[c] += t_dram;
  a.mac[c] += t_mac;
  a.vec[c] += t_vec;
  a.lat[c] += t_lat;
  NodeAcc& t = node_acc(s.time_node_of(in.node));
  t.end[c] = std::max(t.end[c], end);
}

Status CallReplay::run_core(size_t c, const Instr** barrier) {
  CoreSim& s = sims_[c];
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
      QBC_RETURN_IF_ERROR(enter_loop(c, *loop));
      continue;
    }
    QBC_ASSIGN_OR_RETURN(const double ready, ready_time(c, in));
    if (std::holds_alternative<isa::Barrier>(in.op)) {
      ++s.counts.barriers;
      s.qfree[static_cast<int>(in.queue)] = ready;  // set on release, once all have arrived
      s.pc = pc + 1;
      *barrier = &in;
      return ok_status();
    }
    Work w;
    Status st = walker_.work(in, s.env, &w);
    if (!st.ok()) {
      return st.with_context("core " + std::to_string(c) + " instr " + std::to_string(pc) + " (" +
                             isa::op_name(in.op) + ")");
    }
    execute(c, in, ready, w);
    s.pc = pc + 1;
  }
}

void CallReplay::release(const std::vector<const Instr*>& at) {
  double release = 0;
  for (size_t c = 0; c < P_; ++c)
    release = std::max(release, sims_[c].qfree[static_cast<int>(at[c]->queue)]);
  release += p_.barrier_s;
  for (size_t c = 0; c < P_; ++c) {
    CoreSim& s = sims_[c];
    const int q = static_cast<int>(at[c]->queue);
    s.busy_lat += release - s.qfree[q] > 0 ? p_.barrier_s : 0.0;
    if (spec_.spans) {
      spans_.push_back(Span{static_cast<int32_t>(c), at[c]->queue, at[c]->node,
                            isa::op_name(at[c]->op), s.qfree[q], release});
    }
    s.qfree[q] = release;
    for (int ch = 0; ch < isa::kNumChannels; ++ch)
      if ((at[c]->signal >> ch & 1) != 0) s.tokens[ch].push_back(release);
    if (spec_.per_node) {
      NodeAcc& a = node_acc(s.time_node_of(at[c]->node));
      a.end[c] = std::max(a.end[c], release);
    }
  }
}

Status CallReplay::run() {
  start();
  for (;;) {
    std::vector<const Instr*> at(P_, nullptr);
    size_t arrived = 0, finished = 0;
    for (size_t c = 0; c < P_; ++c) {
      if (sims_[c].done) {
        ++finished;
        continue;
      }
      QBC_RETURN_IF_ERROR(run_core(c, &at[c]));
      if (at[c] != nullptr) {
        ++arrived;
      } else {
        ++finished;
      }
    }
    if (arrived == 0) return ok_status();
    if (finished > 0) {
      return invalid_argument("cost model: ", isa::phase_name(spec_.phase),
                              " program: cores pass different numbers of barriers");
    }
    release(at);
  }
}

void CallReplay::node_costs(CallCost* out) const {
  std::vector<std::pair<int64_t, int32_t>> by_order;
  for (const auto& [node, a] : nodes_) by_order.push_back({a.first, node});
  std::sort(by_order.begin(), by_order.end());
  double prev_end = 0;
  for (const auto& [ord, node] : by_order) {
    const NodeAcc& a = nodes_.at(node);
    NodeCost nc;
    nc.node = node;
    nc.counts = a.counts;
    double end = 0;
    for (size_t c = 0; c < P_; ++c) {
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
    out->nodes.push_back(std::move(nc));
  }
}

CallCost CallReplay::result() {
  CallCost out;
  size_t slowest = 0;
  for (size_t c = 0; c < P_; ++c) {
    out.cores.push_back(sims_[c].counts);
    out.total += sims_[c].counts;
    out.core_end_s.push_back(sims_[c].end_time());
    if (sims_[c].end_time() > sims_[slowest].end_time()) slowest = c;
  }
  out.core_seconds = P_ > 0 ? sims_[slowest].end_time() : 0.0;
  out.host_seconds = p_.host_s;
  out.seconds = out.core_seconds + out.host_seconds;
  out.dram_seconds = static_cast<double>(out.total.dram_bytes()) /
                     (dram_rate_ / std::max(1, spec_.active_instances));
  if (P_ > 0) {
    const CoreSim& s = sims_[slowest];
    out.bound = pick_bound(s.busy_dram, s.busy_mac, s.busy_vec, out.core_seconds);
    out.busy_dram_s = s.busy_dram;
    out.busy_mac_s = s.busy_mac;
    out.busy_vector_s = s.busy_vec;
  }
  out.spans = std::move(spans_);
  if (spec_.per_node) node_costs(&out);
  return out;
}

}  // namespace

StatusOr<CallCost> estimate_call(const isa::Bundle& b, const isa::Mode& mode, const CallSpec& spec,
                                 const CostParams& p) {
  const isa::Program& prog = mode.program(spec.phase);
  if (prog.cores.empty())
    return invalid_argument("cost model: the mode has no ", isa::phase_name(spec.phase),
                            " program");
  if (spec.seq < 1 || spec.seq > prog.max_seq || spec.start < 0 ||
      spec.start + spec.seq > b.max_cache) {
    return invalid_argument("cost model: ", isa::phase_name(spec.phase), " call with start ",
                            spec.start, " and ", spec.seq, " tokens is outside the program (",
                            prog.max_seq, " tokens a call, cache ", b.max_cache, ")");
  }
  CallReplay replay(b, prog, spec, p);
  QBC_RETURN_IF_ERROR(replay.run());
  return replay.result();
}

}  // namespace qbc::npu
