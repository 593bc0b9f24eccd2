// Helpers shared by the equivalence-transform passes (private to src/quant): weights
// as fp64 matrices (every transform is computed in fp64 and rounded to fp32 once),
// graph consumers, and the node patterns of a decoder block.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qbc/ir/graph.h"
#include "qbc/quant/pass.h"

namespace qbc::quant {

/// A row-major fp64 matrix ([out, in] for a linear weight).
struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;
  double& at(int64_t r, int64_t c) { return v[static_cast<size_t>(r * cols + c)]; }
  double at(int64_t r, int64_t c) const { return v[static_cast<size_t>(r * cols + c)]; }
};

/// The weight `name` of ctx.graph as fp64 (rank 1 weights are [1, n]).
StatusOr<Matrix> read_matrix(const PassContext& ctx, const std::string& name);
/// Writes `m` back (rounded once to fp32) as weight `name`.
void write_matrix(PassContext& ctx, const std::string& name, const Matrix& m);

/// For every value, the nodes that read it (in graph order).
std::vector<std::vector<ir::ValueId>> consumers(const ir::Graph& g);

/// The weight name of operand `i` of node `id`, or "" when it is not a weight.
std::string weight_operand(const ir::Graph& g, ir::ValueId id, size_t i);

/// One decoder block's attention/FFN nodes, found by the stable names the graph
/// builder gives them ("blk.N.attn.q_proj", ...); -1 where the model has none.
struct BlockNodes {
  int block = -1;
  ir::ValueId attn_norm = -1, q = -1, k = -1, v = -1, qkv = -1, q_norm = -1, k_norm = -1, q_rope = -1,
              k_rope = -1, sdpa = -1, o = -1, ffn_norm = -1, gate = -1, up = -1, gate_up = -1, act = -1,
              down = -1;
};
std::vector<BlockNodes> block_nodes(const ir::Graph& g);

}  // namespace qbc::quant
