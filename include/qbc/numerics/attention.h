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
  /// With k_group, one rotation per group of k_group channels (block diagonal).
  bool qk_hadamard = false;
  /// Channels per key multiplier (0 or head_dim: one per stored key row of a KV head).
  int64_t k_group = 0;
  /// Each key group coded over its own [min, max] with a zero point z in 1/kZeroUnit steps
  /// (int16): the score's sum is kZeroUnit · Σ q·code − z · Σ_group qcodes. Needs k_token_scale.
  bool k_asym = false;
  /// Per-token V multipliers m in [1, 255], units of 1/kVTokenUnit of the static scales,
  /// inside the integer P·V sum (Σ_j e_j · m_j · v_j).
  bool v_token_scale = false;
};

/// One attention node's KV cache, [tokens, KV*d] rows appended per token.
struct KvCache {
  int64_t tokens = 0;
  std::vector<int32_t> k_codes, v_codes;  ///< Quantized caches.
  std::vector<float> k_values, v_values;  ///< Float caches (fp16 values).
  std::vector<float> k_rot;               ///< rope(m) per stored key [tokens, KV*d] (k_rot_offset).
  std::vector<float> k_token;    ///< key multipliers t [tokens, KV, groups] (k_token_scale).
  std::vector<int32_t> k_zero;   ///< key zero points z [tokens, KV, groups] (k_asym).
  std::vector<int32_t> v_token;  ///< V multipliers m [tokens, KV] (v_token_scale).
};

/// Q of one query head prepared for the integer score rule: Q times its KV head's K
/// scales in fp16, then int8 codes with the static or per-token scale.
struct QueryCodes {
  std::vector<int32_t> codes;  ///< [head_dim]
  float mq = 0.0f;             ///< score multiplier fp32(fp64(s_q) · scale)
};

/// Prepares query row `qr` (fp16 [head_dim]) of query head `head`.
void query_codes(const float* qr, int64_t head, const Attention& p, QueryCodes* out);

/// The (soft-capped) score of one key: Σ_g fp32(fp32(acc_g) · mq) · t_g over the key groups
/// in order (t_g = 1 without k_token_scale), acc_g = Σ_{c in g} qcodes_c · kcodes_c (with
/// k_asym: kZeroUnit · that − z_g · Σ_{c in g} qcodes_c, times mq / kZeroUnit instead of mq),
/// + the rotating-offset correction
/// fp32(Σ_c q_c · krot_c) · scale when `krot` is not null.
float key_score(const QueryCodes& q, const float* qr, const int32_t* kcodes, const float* krot,
                const Attention& p, const float* k_token = nullptr,
                const int32_t* k_zero = nullptr);

/// The orthonormal Walsh–Hadamard transform of `n` (a power of two) values in place:
/// butterflies (a + b, a − b) in fp64 at strides 1, 2, 4, …, then each value / sqrt(n).
void hadamard_inplace(double* x, int64_t n);

/// Key multipliers per stored key row of a KV head: head_dim / k_group, or 1.
int64_t key_groups(const Attention& p);

/// One key row of KV head `kvh` (fp32 [head_dim], rotating offset already subtracted)
/// into its codes and, per key group, its multiplier t (1 without k_token_scale) and, when
/// `z` is not null, its zero point (0 without k_asym).
void key_codes(const float* k, int64_t kvh, const Attention& p, int32_t* codes, float* t,
               int32_t* z = nullptr);

/// Asymmetric key zero points are in units of 1/kZeroUnit of the group's step (int16).
inline constexpr int32_t kZeroUnit = 256;

/// The unit of the per-token V multipliers: m / kVTokenUnit of the static scale.
inline constexpr int32_t kVTokenUnit = 64;

/// One V row of KV head `kvh` (fp16 values [head_dim]) into its codes; returns its
/// multiplier m (kVTokenUnit without v_token_scale).
int32_t value_codes(const float* v, int64_t kvh, const Attention& p, int32_t* codes);

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
/// With `span` the call is one bidirectional span (Gemma 3's image tokens, HF's token-type
/// or-mask): every row also sees the call's later keys, up to its last position, and a window
/// reaches back to the span's first position at least, so row p sees
/// [max(0, min(p - window + 1, first)), last]. The caller has checked the capacity.
void attention(const float* q, const float* k, const float* v, int64_t s, const Attention& p,
               KvCache& cache, float* y, bool span = false);

/// full_attention: no cache, no causality. y[s, H*d] for q, k, v [s, H*d] (one KV head per
/// query head), each token attending to every token of its segment: consecutive runs of
/// `segments` tokens (empty: one segment of all s). Quantized (`p.quantized`): the codes,
/// scores, exponent codes and output rule of `attention` with K and V coded per row of the
/// segment (static scales, no rotating offset, no per-token key scale); else the float path.
void full_attention(const float* q, const float* k, const float* v, int64_t s, const Attention& p,
                    const std::vector<int64_t>& segments, float* y);

}  // namespace qbc::numerics
