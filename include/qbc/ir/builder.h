// ir::Builder: the way importers and passes create nodes. Every method infers
// the result type and checks operand shapes, returning a Status that names the
// node on error.
#pragma once

#include <string>
#include <vector>

#include "qbc/ir/graph.h"
#include "qbc/numerics/rope.h"
#include "qbc/support/status.h"

namespace qbc::ir {

/// Attention parameters of an attention node.
struct AttentionParams {
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  double scale = 0.0;     ///< Multiplies q·k.
  double softcap = 0.0;   ///< 0 = none.
  int64_t window = 0;     ///< Sliding window; 0 = global.
  int64_t max_cache = 0;  ///< KV-cache capacity in tokens.
};

/// Appends type-checked nodes to a graph.
class Builder {
 public:
  explicit Builder(Graph& g) : g_(g) {}

  /// Node metadata applied to the following nodes until changed.
  void set_block(int block) { block_ = block; }
  void set_part(Part part) { part_ = part; }

  /// Registers a weight (its type is what operands are checked against).
  void weight(const std::string& name, TensorType type, const std::string& tensor,
              WeightRole role = WeightRole::kParameter, WeightSource source = WeightSource::kModel);

  StatusOr<ValueId> input(const std::string& name, TensorType type);
  StatusOr<ValueId> rms_norm(const std::string& name, ValueId x, const std::string& weight, double eps,
                             bool unit_offset, int64_t group, const std::string& origin);
  /// LayerNorm over the last dim (mean-subtracting); `bias` empty for none.
  StatusOr<ValueId> layer_norm(const std::string& name, ValueId x, const std::string& weight,
                               const std::string& bias, double eps, const std::string& origin);
  StatusOr<ValueId> linear(const std::string& name, ValueId x, const std::string& weight,
                           const std::string& bias, const std::string& origin);
  StatusOr<ValueId> slice(const std::string& name, ValueId x, int64_t start, int64_t end,
                          const std::string& origin);
  StatusOr<ValueId> rope(const std::string& name, ValueId x, ValueId positions, const numerics::Rope& p,
                         const std::string& origin);
  StatusOr<ValueId> attention(const std::string& name, ValueId q, ValueId k, ValueId v,
                              const AttentionParams& p, const std::string& origin);
  StatusOr<ValueId> gated_act(const std::string& name, ValueId gate, ValueId up, const std::string& act,
                              const std::string& origin);
  StatusOr<ValueId> add(const std::string& name, ValueId a, ValueId b, const std::string& origin);
  StatusOr<ValueId> scale(const std::string& name, ValueId x, double factor, const std::string& origin);
  StatusOr<ValueId> softcap(const std::string& name, ValueId x, double cap, const std::string& origin);
  // Vision-tower ops (docs/ir.md, docs/multimodal.md).
  /// GELU: erf (`quick` false) or quick_gelu x·σ(1.702x) (attr approx "quick").
  StatusOr<ValueId> gelu(const std::string& name, ValueId x, const std::string& origin,
                         bool quick = false);
  StatusOr<ValueId> rope_table(const std::string& name, ValueId x, ValueId cos, ValueId sin, int64_t num_heads,
                               int64_t head_dim, const std::string& origin);
  /// `segments` empty: every token attends to every token; otherwise block-diagonal runs.
  StatusOr<ValueId> full_attention(const std::string& name, ValueId q, ValueId k, ValueId v, int64_t num_heads,
                                   int64_t head_dim, double scale, const std::vector<int64_t>& segments,
                                   const std::string& origin);
  StatusOr<ValueId> merge_rows(const std::string& name, ValueId x, int64_t factor, const std::string& origin);
  /// GELU with attr approx `approx` ("" erf, "quick", "tanh": SigLIP's gelu_pytorch_tanh).
  StatusOr<ValueId> gelu_approx(const std::string& name, ValueId x, const std::string& approx,
                                const std::string& origin);
  /// Mean of each kernel x kernel window of the row-major [gh·gw] grid of rows (Gemma 3's pool).
  StatusOr<ValueId> avg_pool(const std::string& name, ValueId x, int64_t grid_w, int64_t kernel,
                             const std::string& origin);

  /// Appends a node of any op with the given attrs, inferring its type.
  StatusOr<ValueId> make(Op op, const std::string& name, std::vector<Operand> operands, Attrs attrs,
                         const std::string& origin);

 private:
  Graph& g_;
  int block_ = -1;
  Part part_ = Part::kBody;
};

/// Infers the result type of node `n` in `g` from its operands and attrs.
/// Errors name the node ("blk.3.attn.q_proj (linear): ...").
StatusOr<TensorType> infer_type(const Graph& g, const Node& n);

}  // namespace qbc::ir
