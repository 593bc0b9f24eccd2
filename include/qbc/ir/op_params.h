// Typed readers of node attributes. A node's attributes are decoded here, once, into the
// numerics layer's own parameter structs, for every interpreter of a graph (the fake-quant
// evaluator, the float reference, the NPU backend). Errors are kInvalidArgument naming the
// node and the key: a required attribute that is absent, an attribute of another kind than
// its schema (op.cpp), or a value the kernels cannot take.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qbc/ir/graph.h"
#include "qbc/numerics/attention.h"
#include "qbc/numerics/linear.h"
#include "qbc/numerics/rope.h"
#include "qbc/support/status.h"

namespace qbc::ir {

/// Every required attribute of `n`'s op (op.cpp) is present and every declared one has its
/// declared kind: kInvalidArgument naming the node and the first key that is not. After it,
/// Attrs' getters cannot fail on `n`.
Status check_attr_kinds(const Node& n);

/// A required attribute of `n`: an error naming the node and `key` when absent or of
/// another kind.
StatusOr<int64_t> required_int(const Node& n, const std::string& key);
StatusOr<double> required_float(const Node& n, const std::string& key);
StatusOr<std::string> required_string(const Node& n, const std::string& key);
StatusOr<std::vector<double>> required_floats(const Node& n, const std::string& key);

/// An optional attribute of `n`: `fallback` when absent, an error naming the node and `key`
/// when of another kind.
StatusOr<int64_t> optional_int(const Node& n, const std::string& key, int64_t fallback);
StatusOr<double> optional_float(const Node& n, const std::string& key, double fallback);
StatusOr<std::vector<double>> optional_floats(const Node& n, const std::string& key,
                                              std::vector<double> fallback);

/// A qlinear node's quantization. `linear` is the kernel's parameter struct without the
/// weights (out, in, wq, wscale, wzero and bias stay empty: they are operands); w_bits and
/// w_zero say how the weight operands are coded. in_scale must be a positive finite fp32.
struct QLinearParams {
  numerics::QLinear linear;
  int w_bits = 8;
  bool w_zero = false;  ///< operand 3 holds an integer zero point per scale
  bool w_min = false;   ///< operand `min_at` holds a float offset per scale (w_group > 0)
  size_t min_at = 0;    ///< the offsets' operand (3, or 4 after zero points), with w_min
  size_t bias_at = 3;   ///< the bias operand's index, when the node has that many operands
};
StatusOr<QLinearParams> qlinear_params(const Node& n);

/// An attention node's parameters: num_heads a positive multiple of num_kv_heads, max_cache
/// positive. With k_bits present, `quantized` and the KV-cache quantization (bits, positive
/// finite scales, finite offsets, zeros when absent; k_rot_offset one value per K channel).
/// `k_rope` is left empty: it is the K operand's rope node, which the caller reads with
/// rope_params.
StatusOr<numerics::Attention> attention_params(const Node& n);

/// A full_attention node's parameters: `attention` with kv_heads = num_heads and no cache
/// (max_cache 0); with k_bits present, `quantized` and the Q/K/V quantization as for attention
/// (no rotating offsets, no per-token key scales). `segments` empty: one segment.
struct FullAttentionParams {
  numerics::Attention attention;
  std::vector<int64_t> segments;
};
StatusOr<FullAttentionParams> full_attention_params(const Node& n);

/// A rope node's parameters (Builder::rope writes them), checked: an even rotary_dim in
/// (0, head_dim] with rotary_dim / 2 inverse frequencies (and as many LongRoPE ones, if any).
StatusOr<numerics::Rope> rope_params(const Node& n);

}  // namespace qbc::ir
