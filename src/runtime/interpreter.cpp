// The per-core interpreter (see interpreter.h).
#include "interpreter.h"

#include <time.h>

#include <chrono>
#include <type_traits>
#include <variant>

namespace qbc::runtime {
namespace {

/// Seconds on the steady clock, or of this thread's CPU time with `cpu` (QBC_EXEC_PROFILE=cpu:
/// figures that other processes on the host do not inflate; host threads other than the
/// core's own are not counted).
double profile_clock(bool cpu) {
  if (cpu) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string instr_label(const isa::Bundle& b, const isa::Program& p, size_t core, size_t pc) {
  std::string s = std::string(isa::phase_name(p.phase)) + " core " + std::to_string(core) +
                  " instr " + std::to_string(pc);
  const auto& code = p.cores[core].code;
  if (pc >= code.size()) return s;
  const isa::Instr& in = code[pc];
  s += " (" + std::string(isa::op_name(in.op));
  if (in.node >= 0 && static_cast<size_t>(in.node) < b.nodes.size()) {
    s += ", node '" + b.nodes[static_cast<size_t>(in.node)] + "'";
  }
  return s + ")";
}

Interpreter::Interpreter(const isa::Bundle& b, const isa::Program& p, size_t core,
                         int32_t loop_vars)
    : bundle_(&b), program_(&p), code_(&p.cores[core].code), core_(core) {
  env_.loop.assign(static_cast<size_t>(loop_vars), 0);
}

void Interpreter::start(int64_t start, int64_t seq, int slot) {
  pc_ = 0;
  loops_.clear();
  env_.sym[static_cast<int>(isa::Sym::kStart)] = start;
  env_.sym[static_cast<int>(isa::Sym::kSeq)] = seq;
  env_.sym[static_cast<int>(isa::Sym::kSlot)] = slot;
}

void Interpreter::close_loops() {
  while (!loops_.empty() && pc_ == loops_.back().end) {
    Frame& f = loops_.back();
    if (++f.iter < f.trip) {
      env_.loop[static_cast<size_t>(f.var)] = f.iter;
      pc_ = f.begin;
      return;
    }
    loops_.pop_back();
  }
}

Status Interpreter::run(Core& core, const isa::Barrier** barrier) {
  *barrier = nullptr;
  for (;;) {
    close_loops();
    if (pc_ >= code_->size()) return ok_status();
    const size_t pc = pc_;
    const isa::Instr& in = (*code_)[pc];
    ++core.counters.instructions;
    if (const auto* loop = std::get_if<isa::Loop>(&in.op)) {
      const int64_t trip = loop->trip.eval(env_);
      const size_t end = pc + 1 + static_cast<size_t>(loop->body);
      if (trip <= 0 || loop->body == 0) {
        pc_ = end;
        continue;
      }
      loops_.push_back(Frame{loop->var, trip, 0, pc + 1, end});
      env_.loop[static_cast<size_t>(loop->var)] = 0;
      pc_ = pc + 1;
      continue;
    }
    if (const auto* b = std::get_if<isa::Barrier>(&in.op)) {
      ++core.counters.barriers;
      pc_ = pc + 1;
      *barrier = b;
      return ok_status();
    }
    const double t0 = core.profile ? profile_clock(core.profile_cpu) : 0.0;
    const double trace_t0 = core.trace != nullptr ? profile_clock(false) : 0.0;
    Status s = std::visit(
        [&](const auto& op) -> Status {
          using T = std::decay_t<decltype(op)>;
          if constexpr (std::is_same_v<T, isa::Loop> || std::is_same_v<T, isa::Barrier>) {
            return ok_status();  // handled above
          } else {
            return exec(op, core);  // the op's kernel (core.h)
          }
        },
        in.op);
    if (core.profile) {
      const size_t k = in.op.index();
      ++core.data.profile.count[k];
      core.data.profile.seconds[k] += profile_clock(core.profile_cpu) - t0;
    }
    if (core.trace != nullptr) {
      core.trace->push_back(ExecSpan{core.index, in.queue, in.node, isa::op_name(in.op),
                                     trace_t0 - core.trace_t0,
                                     profile_clock(false) - core.trace_t0});
    }
    if (!s.ok()) return s.with_context(instr_label(*bundle_, *program_, core_, pc));
    pc_ = pc + 1;
  }
}

}  // namespace qbc::runtime
