// How a graph's weights are read: every consumer of an MBLT graph's weights (the float
// reference runtime, the fake-quant evaluator, quantization passes, the backend's emitter)
// takes a WeightReader, and every weight source (a model file, an MBLT sidecar, a pass's
// rewritten weights) provides one.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
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

/// Zero-copy access to a weight stored as bf16 (a source model's host embedding): its
/// `w.type.num_elements()` raw bf16 values row-major, or nullptr when stored otherwise. The
/// backend keeps the table in this form (isa::Bundle::embedding_bf16_view) instead of
/// widening 2 bytes per value to 4, so the bytes must outlive the bundle.
using Bf16View = std::function<const uint16_t*(const Weight& w)>;

/// Called by a consumer once it has copied what an Int8View gave it for `w` and will not
/// read the view again: the owner may drop those bytes from the process's memory (a file
/// mapping's pages, which stay readable from the file). Lets the backend build a weight image
/// while the sidecar it copies from stays out of the resident set (docs/performance.md
/// "Compiling an 8B model").
using ViewDone = std::function<void(const Weight& w)>;

/// The zero-copy views a weight's consumer may take (each may be empty). Converts from an
/// Int8View alone.
struct WeightViews {
  WeightViews() = default;
  WeightViews(Int8View int8) : codes(std::move(int8)) {}  // NOLINT(google-explicit-constructor)
  WeightViews(Int8View int8, Bf16View bf16, ViewDone done = nullptr)
      : codes(std::move(int8)), bf16(std::move(bf16)), codes_done(std::move(done)) {}
  Int8View codes;
  Bf16View bf16;
  ViewDone codes_done;  ///< told when a view `codes` gave is no longer read (may be empty)
};

}  // namespace qbc::ir
