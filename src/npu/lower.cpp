// lower (docs/npu.md "Passes", "Lowering"): per inference scheme a prefill program (up to
// `chunk` rows per call) and a decode program (one row), each with a stream per cooperating
// core. Every MBLT value lives in DRAM (activation region, per instance slot); each node
// becomes a stage: the cores load their share of the inputs into SRAM, compute, and store
// their share of the output; with several cooperating cores a barrier ends the stage. The
// op families are lowered in lower_rows.cpp, lower_linear.cpp and lower_attention.cpp. The
// programs leave this pass without dependency tokens (assign-tokens adds them).
#include <memory>
#include <string>

#include "backend.h"
#include "lowering.h"
#include "passes.h"

namespace qbc::npu {
namespace {

using ir::Node;
using ir::Op;

/// The streams of every core of `prog` for mode `m` and `phase`.
Status lower_program(Context& cx, const ModeRequest& m, isa::Phase phase, isa::Program* prog) {
  prog->phase = phase;
  prog->max_seq = phase == isa::Phase::kDecode ? 1 : cx.o.chunk;
  const std::string prefix =
      std::string(isa::scheme_name(m.scheme)) + "." + isa::phase_name(phase) + ".";
  const auto& nodes = cx.g.nodes();
  for (int c = 0; c < m.cores; ++c) {
    isa::CoreProgram cp;
    cp.core = c;
    Stream s(&cp.code);
    CoreLowering L{cx, s, c, m.cores, prog->max_seq, prefix};
    L.span = phase == isa::Phase::kSpan;
    L.phase = phase;
    // A feature graph (docs/npu.md "Feature bundles") has no decode program: its streams
    // stay empty.
    const bool empty = phase == isa::Phase::kDecode && cx.plan.features();
    for (size_t i = 0; i < nodes.size() && !empty; ++i) {
      const Node& n = nodes[i];
      const int id = static_cast<int>(i);
      switch (n.op) {
        case Op::kInput:
        case Op::kSlice:
        case Op::kMergeRows:  // views (plan-memory)
          continue;
        case Op::kQLinear:
          QBC_RETURN_IF_ERROR(lower_linear(n, id, L));
          break;
        case Op::kAttention:
        case Op::kFullAttention:
          lower_attention(n, id, L);
          break;
        case Op::kLinear:
          return internal_error(ir::describe(n), ": float linear reached lowering");
        default:
          lower_rows(n, id, L);
          break;
      }
      ++L.stage;
      L.barrier(id);
    }
    prog->cores.push_back(std::move(cp));
  }
  return ok_status();
}

/// lower: every mode's prefill and decode programs (and span programs when asked).
class Lower final : public pass::Pass<Context> {
 public:
  std::string name() const override { return "lower"; }
  pass::ResourceSet needs() const override { return Context::kTiles | Context::kMemory; }
  pass::ResourceSet provides() const override { return Context::kPrograms; }
  StatusOr<bool> run(Context& cx) override {
    bool emitted = false;
    for (const ModeRequest& m : cx.o.modes) {
      isa::Mode mode;
      mode.scheme = m.scheme;
      mode.cores_per_instance = m.cores;
      mode.instances = m.instances;
      QBC_RETURN_IF_ERROR(lower_program(cx, m, isa::Phase::kPrefill, &mode.prefill));
      QBC_RETURN_IF_ERROR(lower_program(cx, m, isa::Phase::kDecode, &mode.decode));
      if (cx.o.span_programs) {
        if (cx.plan.features())
          return invalid_argument("lower: span programs requested for a feature graph");
        QBC_RETURN_IF_ERROR(lower_program(cx, m, isa::Phase::kSpan, &mode.span));
      }
      for (const isa::Program* p : mode.programs()) {
        for (const isa::CoreProgram& cp : p->cores) emitted = emitted || !cp.code.empty();
      }
      cx.b.modes.push_back(std::move(mode));
    }
    cx.have |= Context::kPrograms;
    return emitted;
  }
};

}  // namespace

PassPtr make_lower() { return std::make_unique<Lower>(); }

}  // namespace qbc::npu
