// The basis each node's output is in after the equivalence transforms, as the quantized
// graph records it, for comparing a quantized graph with its float source node by node.
//
// The transforms are function-preserving for the model, not for every node: spinR1 rotates
// the residual stream (every value it carries is x·R1), and the scale migrations and
// rotations of q/k/v/up rows (qk, qkRotation, vo, spinR2, ud, searchWeightScale's folds)
// change those projections' outputs by a per-channel scale or a per-head rotation that a
// later node undoes. The passes record what they did in the graph's metadata:
//   kSpinR1Key           "<seed> <hidden>" and then one line per value in the rotated stream
//   kRebasedOutputsKey   one line "<node>\t<pass>" per linear whose output rows a pass rewrote
// so a report can undo R1 (the rotation is the seeded one spinR1 used) and leave out the
// outputs whose basis it cannot undo.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "qbc/ir/graph.h"
#include "qbc/support/status.h"

namespace qbc::quant {

inline constexpr const char* kSpinR1Key = "qbc.spinR1";
inline constexpr const char* kRebasedOutputsKey = "qbc.rebased_outputs";

/// What a graph's metadata says about its node outputs' bases.
struct OutputBasis {
  std::optional<uint64_t> spin_r1_seed;  ///< set when spinR1 rotated the residual stream
  int64_t hidden = 0;                    ///< the rotation's order
  std::set<std::string> rotated;         ///< values in the rotated residual stream
  /// Linears whose output a transform re-based, with the passes that did ("qk, qkRotation").
  std::map<std::string, std::string> rebased;
};

/// Reads the records of the header comment; an empty OutputBasis for a graph without them
/// (a float graph, or one quantized with no transform). kInvalidArgument naming the key on a
/// malformed record.
StatusOr<OutputBasis> output_basis(const ir::Graph& g);

/// Replaces each of the `count` rows of length b.hidden at `rows` by row·R1ᵀ, which brings a
/// value of the rotated residual stream back to the float model's basis. kFailedPrecondition
/// when `b` has no rotation.
Status undo_spin_r1(const OutputBasis& b, float* rows, int64_t count);

/// Replaces each of the `count` rows of length b.hidden at `rows` by row·R1: a value of the
/// float model's basis into the rotated residual stream (what the host embedding holds after
/// spinR1). kFailedPrecondition when `b` has no rotation.
Status apply_spin_r1(const OutputBasis& b, float* rows, int64_t count);

/// Records for spinR1 (seed, order, the rotated values) in `g`'s metadata.
void record_spin_r1(ir::Graph& g, uint64_t seed, int64_t hidden,
                    const std::vector<std::string>& rotated);
/// Adds "<node>\t<pass>" to `g`'s kRebasedOutputsKey (once per node and pass).
void record_rebased(ir::Graph& g, const std::string& node, const std::string& pass);

}  // namespace qbc::quant
