// Which equivalence transforms run, and in which order (quant.md §15).
#include "qbc/quant/transforms.h"

namespace qbc::quant {

StatusOr<std::vector<std::unique_ptr<Pass>>> pre_calibration_transforms(const config::CompileOptions& options) {
  const auto& et = options.equivalent_transformation();
  std::vector<std::unique_ptr<Pass>> passes;
  if (et.norm_conv().apply()) passes.push_back(make_norm_conv());
  if (et.spin_r1().apply()) {
    if (!et.norm_conv().apply()) {
      return invalid_argument("equivalentTransformation.spinR1 needs normConv: the residual-stream rotation is "
                              "only function-preserving once RMSNorm gains are folded into the linears");
    }
    return unimplemented("equivalentTransformation.spinR1 is not implemented yet");
  }
  if (et.spin_r2().apply()) return unimplemented("equivalentTransformation.spinR2 is not implemented yet");
  return passes;
}

}  // namespace qbc::quant
