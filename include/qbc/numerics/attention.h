// The attention kernel and its KV cache: docs/numerics.md "attention (with KV cache)"
// (integer Q·Kᵀ and P·V with static per-channel K/V scales and offsets, rotating key
// offsets, static or per-token Q scales, fp32 softmax with exp in fp64, P codes with a fixed
// scale; the float path for unquantized graphs). Values are rows of floats ([s, n]
// row-major, batch 1) holding fp16 values.
#pragma once

#include <cstdint>
#include <vector>

#include "qbc/numerics/rope.h"

namespace qbc::numerics {

/// An attention node's parameters; the quantized fields are used when `quantized`.
struct Attention {
  int64_t heads = 0, kv_heads = 0, head_dim = 0, window = 0, max_cache = 0;
  double scale = 0.0, softcap = 0.0;
  bool quantized = false;
  int k_bits = 8, v_bits = 8, p_bits = 8;
  bool q_dynamic = false;                        ///< per-(token, head) Q scale instead of q_scale.
  std::vector<float> q_scale, k_scale, v_scale;  ///< fp32: [H], [KV*d], [KV*d].
  std::vector<float> k_offset, v_offset;         ///< fp32 [KV*d] code offsets (zeros when absent).
  /// Rotating key offsets: fp32 [KV*d] pre-RoPE offsets m (zero for channels without),
  /// or empty. Each key is stored minus rope(m) at its position, with K's rope `k_rope`.
  std::vector<float> k_rot_offset;
  Rope k_rope;
};

/// One attention node's KV cache, [tokens, KV*d] rows appended per token.
struct KvCache {
  int64_t tokens = 0;
  std::vector<int32_t> k_codes, v_codes;  ///< Quantized caches.
  std::vector<float> k_values, v_values;  ///< Float caches (fp16 values).
  std::vector<float> k_rot;               ///< rope(m) per stored key [tokens, KV*d] (k_rot_offset).
};

/// Appends k, v[s, KV*d] to `cache` (quantizing them when p.quantized), then computes
/// y[s, H*d] for queries q[s, H*d] at positions cache.tokens - s.. (causal, window, GQA).
/// The caller has checked the capacity.
void attention(const float* q, const float* k, const float* v, int64_t s, const Attention& p,
               KvCache& cache, float* y);

}  // namespace qbc::numerics
