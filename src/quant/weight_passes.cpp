// Which weight passes run, and in which order.
#include "qbc/quant/weight_passes.h"

namespace qbc::quant {

StatusOr<std::vector<std::unique_ptr<Pass>>> weight_passes(const config::CompileOptions& options) {
  std::vector<std::unique_ptr<Pass>> passes;
  if (options.search_weight_scale().apply()) {
    passes.push_back(make_search_weight_scale(options.search_weight_scale()));  // TEMP (awq e2e)
  }
  if (options.hessian_quant().apply()) {
    return unimplemented("hessianQuant is not implemented yet");
  }
  return passes;
}

}  // namespace qbc::quant
