// Which weight passes run, and in which order.
#include "qbc/quant/weight_passes.h"

namespace qbc::quant {

StatusOr<std::vector<std::unique_ptr<Pass>>> weight_passes(const config::CompileOptions& options) {
  std::vector<std::unique_ptr<Pass>> passes;
  // The scale search first: GPTQ then quantizes the weights it rescaled (its clipped
  // integers are replaced by GPTQ's for the linears both cover).
  if (options.search_weight_scale().apply()) passes.push_back(make_search_weight_scale(options.search_weight_scale()));
  if (options.hessian_quant().apply()) passes.push_back(make_hessian_quant(options.hessian_quant()));
  return passes;
}

}  // namespace qbc::quant
