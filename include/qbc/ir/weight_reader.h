// How a graph's weights are read: every consumer of an MBLT graph's weights (the float
// reference runtime, the fake-quant evaluator, quantization passes, the backend's emitter)
// takes a WeightReader, and every weight source (a model file, an MBLT sidecar, a pass's
// rewritten weights) provides one.
#pragma once

#include <functional>
#include <vector>

#include "qbc/ir/graph.h"
#include "qbc/support/status.h"

namespace qbc::ir {

/// Supplies the float32 data of a weight (row-major, `w.type` shape).
using WeightReader = std::function<Status(const Weight& w, std::vector<float>* out)>;

}  // namespace qbc::ir
