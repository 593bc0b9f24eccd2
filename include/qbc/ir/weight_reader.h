// How a graph's weights are read: every consumer of an MBLT graph's weights (the float
// reference runtime, the fake-quant evaluator, quantization passes, the backend's emitter)
// takes a WeightReader, and every weight source (a model file, an MBLT sidecar, a pass's
// rewritten weights) provides one.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "qbc/ir/graph.h"
#include "qbc/support/status.h"

namespace qbc::ir {

/// Supplies the float32 data of a weight (row-major, `w.type` shape).
using WeightReader = std::function<Status(const Weight& w, std::vector<float>* out)>;

/// Zero-copy access to a weight stored as signed 8-bit integers (a quantized linear's codes
/// in an MBLT sidecar): its `w.type.num_elements()` values row-major, or nullptr when the
/// weight is stored in another type (read it through a WeightReader then). The bytes stay
/// valid while the weight's file is open. Lets the backend copy a model's codes as they are
/// instead of converting every one to float and back.
using Int8View = std::function<const int8_t*(const Weight& w)>;

}  // namespace qbc::ir
