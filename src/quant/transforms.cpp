// Which equivalence transforms run, and in which order (quant.md §15).
#include "qbc/quant/transforms.h"

#include "qbc/quant/norm_smooth.h"

namespace qbc::quant {
namespace {

/// optimizeFfn: a documented no-op. Its candidate meanings for this target (fusing gate
/// and up into one GEMM, fusing SiLU·up into the GEMM epilogue, reordering FFN channels
/// for the 8-core tiling) do not change any value the numerics contract defines, so
/// they belong to the backend's lowering, not to a float-graph rewrite; measured: an
/// identical quantized model with and without it (docs/quantization.md).
class OptimizeFfn final : public Pass {
 public:
  std::string name() const override { return "optimizeFfn"; }
  StatusOr<bool> run(PassContext&) override { return false; }
};

}  // namespace

StatusOr<std::vector<std::unique_ptr<Pass>>> pre_calibration_transforms(const config::CompileOptions& options) {
  const auto& et = options.equivalent_transformation();
  std::vector<std::unique_ptr<Pass>> passes;
  const bool r1 = et.spin_r1().apply();
  if (r1 && !et.norm_conv().apply()) {
    return invalid_argument("equivalentTransformation.spinR1 needs normConv: the residual-stream rotation is "
                            "only function-preserving once RMSNorm gains are folded into the linears");
  }
  const auto seed = static_cast<uint64_t>(et.spin_r1().seed());
  if (r1 && et.spin_r1().policy() == config::ROTATION_POLICY_IF_BETTER) {
    // Measure first; normConv (here only spinR1's prerequisite) and spinR1 run only when it helps.
    auto gate = std::make_shared<RotationGate>();
    passes.push_back(make_rotation_check(seed, gate));
    passes.push_back(gate_on_rotation(make_norm_conv(), gate));
    passes.push_back(gate_on_rotation(make_spin_r1(seed), gate));
  } else {
    if (et.norm_conv().apply()) passes.push_back(make_norm_conv());
    if (r1) passes.push_back(make_spin_r1(seed));
  }
  if (et.spin_r2().apply()) passes.push_back(make_spin_r2(static_cast<uint64_t>(et.spin_r2().seed())));
  if (et.qk_rotation().apply()) passes.push_back(make_qk_rotation());
  if (et.optimize_ffn().apply()) passes.push_back(std::make_unique<OptimizeFfn>());
  return passes;
}

std::vector<std::unique_ptr<Pass>> scale_transforms(const config::CompileOptions& options) {
  const auto& et = options.equivalent_transformation();
  std::vector<std::unique_ptr<Pass>> passes;
  // Each reads statistics of values the others do not change (q/k after RoPE, the
  // attention output, the down_proj input, the norm outputs), so one calibration
  // serves all of them.
  if (et.qk().apply()) passes.push_back(make_qk_scale());
  if (et.vo().apply()) passes.push_back(make_vo_scale());
  if (et.ud().apply()) passes.push_back(make_ud_scale(et.ud().smoothing_factor()));
  if (et.norm_smooth().apply()) passes.push_back(make_norm_smooth(et.norm_smooth().smoothing_factor()));
  return passes;
}

}  // namespace qbc::quant
