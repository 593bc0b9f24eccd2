// The attention kernel and its KV cache: docs/numerics.md "attention (with KV cache)"
// (integer Q·Kᵀ and P·V with static per-channel K/V scales and offsets, rotating key
// offsets, static or per-token Q scales, the tile-invariant softmax: an exact max, integer
// exponent codes, integer sums, one normalisation; the float path for unquantized graphs).
// Values are rows of floats ([s, n] row-major, batch 1) holding fp16 values.
//
// The per-element rules (query_codes, key_score, exp_code, attention_output) are what the
// NPU executor calls tile by tile; `attention` applies them over the whole cache. Every
// sum they leave to the caller is an integer sum, so any split of the cache dimension
// (tiles, cores, chunks) gives the same bits.
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
  /// Per-token key scales: each stored key row of a KV head gets an fp16 multiplier t
  /// (its largest |(k_c − o_c) / s_c| over qmax), the codes use s_c · t, the score × t.
  bool k_token_scale = false;
  /// Online per-head Walsh–Hadamard rotation of Q and K (after RoPE and the rotating
  /// offset) before their codes: exact in the score, q·k = (Hq)·(Hk). Needs k_token_scale.
  bool qk_hadamard = false;
};

/// One attention node's KV cache, [tokens, KV*d] rows appended per token.
struct KvCache {
  int64_t tokens = 0;
  std::vector<int32_t> k_codes, v_codes;  ///< Quantized caches.
  std::vector<float> k_values, v_values;  ///< Float caches (fp16 values).
  std::vector<float> k_rot;               ///< rope(m) per stored key [tokens, KV*d] (k_rot_offset).
  std::vector<float> k_token;             ///< per-token key scales t [tokens, KV] (k_token_scale).
};

/// Q of one query head prepared for the integer score rule: Q times its KV head's K
/// scales in fp16, then int8 codes with the static or per-token scale.
struct QueryCodes {
  std::vector<int32_t> codes;  ///< [head_dim]
  float mq = 0.0f;             ///< score multiplier fp32(fp64(s_q) · scale)
};

/// Prepares query row `qr` (fp16 [head_dim]) of query head `head`.
void query_codes(const float* qr, int64_t head, const Attention& p, QueryCodes* out);

/// The (soft-capped) score of one key: fp32(acc) · mq (+ the rotating-offset correction
/// fp32(Σ_c q_c · krot_c) · scale when `krot` is not null), acc = Σ_c qcodes_c · kcodes_c.
float key_score(const QueryCodes& q, const float* qr, const int32_t* kcodes, const float* krot,
                const Attention& p, float k_token = 1.0f);

/// The orthonormal Walsh–Hadamard transform of `n` (a power of two) values in place:
/// butterflies (a + b, a − b) in fp64 at strides 1, 2, 4, …, then each value / sqrt(n).
void hadamard_inplace(double* x, int64_t n);

/// One key row of KV head `kvh` (fp32 [head_dim], rotating offset already subtracted)
/// into its codes (and, with k_token_scale, its per-token scale t; else 1).
void key_codes(const float* k, int64_t kvh, const Attention& p, int32_t* codes, float* t);

/// rope(m) of the rotating key offsets at cache position `pos`, for all KV heads
/// (out: [KV*d]); one-position rope call, so it does not depend on how keys were batched.
void rotated_key_offset(const Attention& p, int64_t pos, float* out);

/// The exponent code of a score against the row's exact max: clamp(rne(exp_fp64(score −
/// max) · (2^bits − 1)), 0, 2^bits − 1), the subtraction in fp32; a masked score
/// (−inf) gives 0. The row's maximum score gets 2^bits − 1.
int32_t exp_code(float score, float max, int bits);

/// One output channel: fp16(fp64(acc) / fp64(esum) · s_v + o_v) in fp64, where acc =
/// Σ_j e_j · v_j over the row's exponent codes and V codes, and esum = Σ_j e_j.
float attention_output(int64_t acc, int64_t esum, float v_scale, float v_offset);

/// Appends k, v[s, KV*d] to `cache` (quantizing them when p.quantized), then computes
/// y[s, H*d] for queries q[s, H*d] at positions cache.tokens - s.. (causal, window, GQA).
/// The caller has checked the capacity.
void attention(const float* q, const float* k, const float* v, int64_t s, const Attention& p,
               KvCache& cache, float* y);

/// full_attention: no cache, no causality. y[s, H*d] for q, k, v [s, H*d] (one KV head per
/// query head), each token attending to every token of its segment: consecutive runs of
/// `segments` tokens (empty: one segment of all s). Quantized (`p.quantized`): the codes,
/// scores, exponent codes and output rule of `attention` with K and V coded per row of the
/// segment (static scales, no rotating offset, no per-token key scale); else the float path.
void full_attention(const float* q, const float* k, const float* v, int64_t s, const Attention& p,
                    const std::vector<int64_t>& segments, float* y);

}  // namespace qbc::numerics
