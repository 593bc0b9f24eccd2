// A quantized graph without calibration or weights: every node, attribute and weight shape
// `qbc quantize` would produce for `options` (bits, groups, zero points, activation scaling,
// KV-cache bits), with placeholder scales; rotating key offsets, which depend on the
// statistics, are left out. It is quantize_rtn over a weight source without values. The
// backend plans memory and programs from it (shapes only), so "does it fit?" is answered
// before any calibration work, and models known only by their config.json can be planned.
#pragma once

#include "compile_options.pb.h"
#include "qbc/ir/graph.h"
#include "qbc/support/status.h"

namespace qbc::quant {

/// The shape of the quantized form of float graph `g` under `options`. Weights of the
/// result that the quantizer would write are sidecar weights with no data: read none.
StatusOr<ir::Graph> shape_only(const ir::Graph& g, const config::CompileOptions& options);

}  // namespace qbc::quant
