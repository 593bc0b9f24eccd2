// The shape of a quantized graph (see qbc/quant/shape_only.h): quantize_rtn itself, over a
// weight source without values, so the rewrite is written once.
#include "qbc/quant/shape_only.h"

#include "qbc/quant/quantize.h"

namespace qbc::quant {

StatusOr<ir::Graph> shape_only(const ir::Graph& g, const config::CompileOptions& options) {
  const ir::WeightReader no_values;  // empty: quantize_rtn writes shapes and placeholders only
  QBC_ASSIGN_OR_RETURN(QuantizeResult r, quantize_rtn(g, CalibStats(), no_values, options));
  return std::move(r.graph);
}

}  // namespace qbc::quant
