// Helpers shared by the equivalence-transform passes (private to src/quant): weights
// as fp64 matrices (every transform is computed in fp64 and rounded to fp32 once),
// graph consumers, and the node patterns of a decoder block.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qbc/ir/graph.h"
#include "qbc/quant/output_basis.h"
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

/// Records that `pass` rewrote the output rows of node `id` (a linear), so its output is no
/// longer in the float model's basis: the graph's metadata kRebasedOutputsKey, read by the
/// per-layer accuracy report (qbc/quant/output_basis.h).
void note_rebased(PassContext& ctx, ir::ValueId id, std::string_view pass);

/// A migration scale a^α / b^(1−α) (SmoothQuant's rule). No information (a zero or
/// non-finite input) gives 1 (the channel is left alone); otherwise the result is kept
/// in [1e-5, 1e5].
double smooth_scale(double a, double b, double alpha);

/// The per-channel max |x| of node `node` in ctx.stats, which must have `channels`
/// channels (kFailedPrecondition naming the node otherwise).
StatusOr<const std::vector<float>*> channel_max(const PassContext& ctx, const std::string& node,
                                                int64_t channels);

/// Head counts of an attention node, checked (H a positive multiple of KV).
struct AttentionHeads {
  int64_t heads = 0, kv_heads = 0, head_dim = 0, group = 0;  ///< group = heads / kv_heads
};
StatusOr<AttentionHeads> attention_heads(const ir::Node& attention);

/// A pass that rewrites the projections around each attention node (qk, vo,
/// qkRotation): run() calls run_attention() on every attention node in graph order with
/// its checked head counts; true when any call changed something. What a subclass needs
/// from the context it declares with needs() (the pass manager checks it).
class AttentionPass : public Pass {
 public:
  using Users = std::vector<std::vector<ir::ValueId>>;
  StatusOr<bool> run(PassContext& ctx) final;

 protected:
  virtual StatusOr<bool> run_attention(PassContext& ctx, const Users& users, ir::ValueId att,
                                       const AttentionHeads& heads) = 0;
};

/// The rope nodes feeding an attention's q and k, each read only by it, with their
/// sources (the projection, a slice of a fused one, or a QK-norm) and the rotary width
/// (even, ≤ head_dim, equal for q and k); kUnimplemented naming the attention otherwise.
struct QkRope {
  ir::ValueId q_rope = -1, k_rope = -1, q_src = -1, k_src = -1;
  int64_t rotary = 0;
};
StatusOr<QkRope> qk_rope(const ir::Graph& g, const std::vector<std::vector<ir::ValueId>>& users,
                         ir::ValueId att, int64_t head_dim);

/// For every value, the nodes that read it (in graph order).
std::vector<std::vector<ir::ValueId>> consumers(const ir::Graph& g);

/// Output rows [offset, offset + count) of a linear.
struct Rows {
  ir::ValueId linear = -1;
  int64_t offset = 0, count = 0;
};

/// The linear rows that make value `v` (a linear, or a slice of one), which only
/// `reader` may read; the linear's other readers must be slices of other rows
/// (kUnimplemented naming the nodes otherwise). For passes that rewrite q/k rows.
StatusOr<Rows> producer_rows(const ir::Graph& g, const std::vector<std::vector<ir::ValueId>>& users,
                             ir::ValueId v, ir::ValueId reader);

/// Warns once (stage "transforms": "<what>: N layer_norm node(s), first '<name>': <why>") when
/// `g` holds layer_norm nodes, which passes written for RMSNorm models leave alone or skip.
/// Returns how many there are.
int warn_layer_norms(const ir::Graph& g, std::string_view what, std::string_view why);

/// The weight name of operand `i` of node `id`, or "" when it is not a weight.
std::string weight_operand(const ir::Graph& g, ir::ValueId id, size_t i);

/// One decoder block's attention/FFN nodes, found by the stable names the graph
/// builder gives them ("blk.N.attn.q_proj", ...); -1 where the model has none.
struct BlockNodes {
  int block = -1;
  ir::ValueId attn_norm = -1, q = -1, k = -1, v = -1, qkv = -1, q_norm = -1, k_norm = -1,
              q_rope = -1, k_rope = -1, sdpa = -1, o = -1, ffn_norm = -1, gate = -1, up = -1,
              gate_up = -1, act = -1, down = -1;
};
std::vector<BlockNodes> block_nodes(const ir::Graph& g);
/// The block of `blocks` that has a node (attention norm, q/qkv, o or down) among `names`
/// (a BlockRunner segment's nodes), or null (the segments before and after the blocks).
const BlockNodes* block_among(const ir::Graph& g, const std::vector<BlockNodes>& blocks,
                              const std::vector<std::string>& names);

/// A seeded orthogonal n×n matrix R for the rotation passes (spinR1, spinR2): the random
/// Hadamard random_hadamard(n, seed) = H_n·diag(s)/√n of qbc/quant/hadamard.h when n is a
/// supported Hadamard order (applied with the fast transform), otherwise a dense random
/// orthogonal matrix (Gram–Schmidt QR of a seeded Gaussian; quant.md §3.6, "when there is
/// no K"). Deterministic in (n, seed) on every machine.
class Rotation {
 public:
  static StatusOr<Rotation> make(int64_t n, uint64_t seed);
  int64_t size() const { return n_; }
  /// True when R is the random Hadamard (false: the dense fallback).
  bool is_hadamard() const { return dense_.empty(); }
  /// Replaces each of the `count` contiguous length-n rows x at `x` by x·R (the same as
  /// applying Rᵀ to each as a column vector).
  Status right_multiply_rows(double* x, int64_t count) const;
  /// W ← Rᵀ·W for W [n, cols] (each column c becomes Rᵀ·c: the rows of Wᵀ times R).
  Status left_multiply_transposed(Matrix* w) const;
  /// Replaces each of the `count` rows x at `x` by x·Rᵀ (undoes right_multiply_rows).
  Status right_multiply_rows_by_transpose(double* x, int64_t count) const;
  /// R itself, row-major n×n.
  StatusOr<std::vector<double>> matrix() const;

 private:
  int64_t n_ = 0;
  std::vector<int8_t> signs_;  ///< s of the random Hadamard.
  std::vector<double> dense_;  ///< The fallback matrix, row-major; empty for a Hadamard.
};

/// splitmix64's output for `x` (one step from state x): a seed mixer for derived seeds.
uint64_t mix_seed(uint64_t x);

}  // namespace qbc::quant
