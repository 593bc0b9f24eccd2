// The fake-quant evaluator: the executable specification of the NPU's integer
// numerics (docs/numerics.md). It runs an MBLT graph, quantized or not, with plain
// C++ loops: integer matmuls for `qlinear` and quantized attention, fp16 values
// between ops, fp32/fp64 arithmetic inside an op exactly as the spec names it.
// Single-threaded and deterministic: every reduction runs in index order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qbc/ir/graph.h"
#include "qbc/ref/evaluator.h"
#include "qbc/support/status.h"

namespace qbc::quant {

/// Rounds `x` once, to nearest even, to the closest IEEE binary16 value (returned as
/// float; overflow gives ±infinity, NaN stays NaN). Rounds directly from fp64, so it
/// avoids the double rounding of fp64 -> fp32 -> fp16.
float round_fp16(double x);

/// The largest code of a symmetric `bits`-bit quantizer: 2^(bits-1) - 1.
int64_t quant_max(int bits);

/// The symmetric quantizer of docs/numerics.md: clamp(rne((x - offset) / scale), -qmax-1,
/// qmax), the subtraction, division and rounding in fp64 from the fp32 `scale` and
/// `offset` (a KV channel's offset; 0 everywhere else).
int32_t quantize_symmetric(double x, float scale, int bits, float offset = 0.0f);

/// The scale and zero point of an asymmetric `bits`-bit quantizer (docs/numerics.md).
struct AffineParams {
  float scale = 1e-8f;
  int32_t zero = 0;  ///< A code of the signed range [−2^(bits−1), 2^(bits−1) − 1].
};

/// The asymmetric quantizer of a range [lo, hi] holding 0, given as `span` = hi − lo and
/// `neg_lo` = −lo (callers form them in fp64 in their own order): s = max(fp32(span /
/// (2^bits − 1)), 1e-8) and z = clamp(rne(neg_lo / s), 0, 2^bits − 1) − 2^(bits−1).
AffineParams affine_params(double span, double neg_lo, int bits);

/// The softmax probability codes: P is stored as unsigned `bits`-bit integers (8 or
/// 16) with the fixed scale fp32(1 / (2^bits - 1)).
float prob_scale(int bits);

/// A copy of one attention node's KV cache.
struct KvCacheSnapshot {
  bool quantized = false;  ///< True when the node has `k_bits` (integer cache).
  int64_t tokens = 0;      ///< Cached positions.
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  /// Quantized caches: the integer codes, [tokens, kv_heads * head_dim] row-major.
  std::vector<int32_t> k_codes, v_codes;
  /// Float caches: the fp16 values (as float), same layout.
  std::vector<float> k_values, v_values;
};

/// Runs an MBLT graph with the integer/fp16 numerics of docs/numerics.md (batch 1),
/// token by token with a KV cache per attention node. Implements ref::Runner, so
/// perplexity, generation and accuracy reports run on it like on ref::Session.
///
/// Value rules: `inputs_embeds` is rounded to fp16 at the boundary; body ops produce
/// fp16 values; nodes of the head part keep fp32 (logits leave unrounded), except a
/// `qlinear` whose `out_fp16` attribute decides. Because activation scales are static,
/// each token's computation does not depend on how tokens are batched: a prompt run at
/// once and the same prompt run token by token give bitwise identical logits (unless a
/// rope node switches frequencies by sequence length, as dynamic NTK and LongRoPE do).
class FakeQuantSession final : public ref::Runner {
 public:
  /// Loads every weight of `g` through `weights` (integer weights arrive as exact
  /// integer-valued floats) and prepares empty caches. Errors name the node or weight.
  static StatusOr<std::unique_ptr<FakeQuantSession>> create(const ir::Graph& g,
                                                            const ref::WeightReader& weights);
  ~FakeQuantSession() override;

  Status forward(const std::vector<int32_t>& tokens, std::vector<float>* logits) override;
  Status forward_embeds(const std::vector<float>& embeds, int64_t seq,
                        std::vector<float>* logits) override;
  void reset() override;
  int64_t position() const override;
  int64_t vocab_size() const override;
  int64_t hidden_size() const override;
  Status embed(const std::vector<int32_t>& tokens, std::vector<float>* out) const override;
  void set_keep_activations(bool keep) override;
  Status activation(const std::string& node, std::vector<float>* out,
                    std::vector<int64_t>* shape) const override;

  /// The KV cache of attention node `node` (kNotFound for other names), for tests
  /// and for comparing a backend's cache contents bit for bit.
  Status kv_cache(const std::string& node, KvCacheSnapshot* out) const;

 private:
  FakeQuantSession();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qbc::quant
