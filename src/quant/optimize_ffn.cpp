// optimizeFfn: a documented no-op. Its candidate meanings for this target (fusing gate
// and up into one GEMM, fusing SiLU·up into the GEMM epilogue, reordering FFN channels
// for the 8-core tiling) do not change any value the numerics contract defines, so
// they belong to the backend's lowering, not to a float-graph rewrite; measured: an
// identical quantized model with and without it (docs/quantization.md).
#include "qbc/quant/transforms.h"

namespace qbc::quant {
namespace {

class OptimizeFfn final : public Pass {
 public:
  std::string name() const override { return "optimizeFfn"; }
  StatusOr<bool> run(PassContext&) override { return false; }
};

}  // namespace

std::unique_ptr<Pass> make_optimize_ffn() { return std::make_unique<OptimizeFfn>(); }

}  // namespace qbc::quant
