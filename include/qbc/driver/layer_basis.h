// Which nodes a per-layer comparison of a quantized graph with its float source reports, and
// in which basis (qbc/quant/output_basis.h): after the llm preset's transforms the residual
// stream is rotated by spinR1's R1 and some projections' outputs are scaled or rotated, so a
// node-by-node SQNR against the float model is only meaningful where the basis is undone.
//   - block outputs and every linear present in both graphs are candidates;
//   - a value of the rotated residual stream (block outputs, o_proj, down_proj) is compared
//     after undoing R1 (basis "residual, R1 undone");
//   - a linear whose output rows a transform rewrote (q/k: qk, qkRotation; v: vo, spinR2,
//     searchWeightScale; up: ud, searchWeightScale) is left out and listed with the passes;
//   - everything else is compared as is (basis "model").
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "qbc/driver/accuracy.h"
#include "qbc/ir/graph.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// The nodes to compare and how.
struct LayerSelection {
  std::vector<LayerError> nodes;       ///< with basis and undo_spin_r1 set
  std::vector<LayerLeftOut> left_out;  ///< re-based outputs, in graph order
  /// Undoes R1 on rows of a rotated value (CompareOptions::undo_spin_r1); empty without R1.
  std::function<Status(std::vector<float>*)> undo_spin_r1;
};

/// The selection for `test` (usually quantized) against `reference` (its float source).
/// Errors: a malformed basis record in `test`'s metadata, naming the key.
StatusOr<LayerSelection> select_layers(const ir::Graph& test, const ir::Graph& reference);

}  // namespace qbc::driver
