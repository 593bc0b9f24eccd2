// Scalar kernels of the fake-quant evaluator (private to src/quant). Each one is a
// literal transcription of a rule of docs/numerics.md; values are rows of floats
// ([s, n] row-major, batch 1) holding fp16 values unless the caller asks for fp32.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qbc::quant::fq {

/// fp16(v) when `fp16`, else v unchanged.
float maybe_fp16(float v, bool fp16);

/// A qlinear node's constants.
struct QLinear {
  int64_t out = 0, in = 0;
  std::vector<int32_t> wq;    ///< [out, in] integer codes.
  std::vector<float> wscale;  ///< [out], or [out, groups] when group > 0
  std::vector<int32_t> wzero; ///< Zero point per scale, or empty (symmetric).
  std::vector<float> bias;    ///< [out] or empty.
  float in_scale = 1.0f;      ///< fp32, as the spec stores scales (static scaling).
  int in_bits = 8;
  bool in_dynamic = false;    ///< per-token scale max|x[t, :]| / qmax instead of in_scale.
  bool in_asym = false;       ///< asymmetric input codes (a zero point per token, or in_zero).
  int32_t in_zero = 0;        ///< the static input zero point (in_asym, not in_dynamic).
  int64_t group = 0;          ///< > 0: wscale is [out, ceil(in / group)], one scale per group.
  bool out_fp16 = true;
};

/// The smallest scale any quantizer uses.
inline constexpr float kMinScale = 1e-8f;

/// A per-token dynamic scale: fp32(max_i |x[i]| / qmax(bits)), at least kMinScale.
float per_token_scale(const float* x, int64_t n, int bits);

/// The per-token asymmetric scale and zero point of x[0, n) (docs/numerics.md): [lo, hi] =
/// [min(min x, 0), max(max x, 0)], s = fp32((hi − lo) / (2^bits − 1)) (fp64 division, at
/// least kMinScale), z = clamp(rne(−lo / s), 0, 2^bits − 1) − 2^(bits−1).
void per_token_affine(const float* x, int64_t n, int bits, float* scale, int32_t* zero);

/// clamp(rne(x / scale) + zero, −2^(bits−1), 2^(bits−1) − 1), in fp64.
int32_t quantize_affine(double x, float scale, int32_t zero, int bits);

/// y[s, out] = quantized linear of x[s, in] (docs/numerics.md "linear (quantized)").
void qlinear(const float* x, int64_t s, const QLinear& p, float* y);

/// Float linear: fp32 products accumulated in index order, + bias, fp16 when `fp16`.
void linear(const float* x, int64_t s, const std::vector<float>& w, const std::vector<float>& bias,
            int64_t out, int64_t in, bool fp16, float* y);

/// RMSNorm over groups of `group` elements (0 = whole row), fp64 inside, fp16 out.
void rms_norm(const float* x, int64_t s, int64_t n, const std::vector<float>& w, double eps,
              double unit_offset, int64_t group, float* y);

/// A rope node's frequency parameters (ir::RopeParams as attributes).
struct Rope {
  int64_t heads = 0, head_dim = 0, rotary_dim = 0;
  std::vector<double> inv_freq, long_inv_freq;
  double attention_factor = 1.0, dynamic_factor = 0.0, theta = 10000.0;
  int64_t original_max_positions = 0;
  /// Frequencies for a call whose largest position is `max_pos` (LongRoPE / dynamic NTK
  /// switch exactly as the float runtime's RopeTable::frequencies).
  std::vector<double> frequencies(int64_t max_pos) const;
};

/// Rotates x[s, heads*head_dim] at positions first_pos.. with fp16 cos/sin tables.
void rope(const float* x, int64_t s, int64_t first_pos, const Rope& p, float* y);

/// An attention node's parameters; the quantized fields are used when `quantized`.
struct Attention {
  int64_t heads = 0, kv_heads = 0, head_dim = 0, window = 0, max_cache = 0;
  double scale = 0.0, softcap = 0.0;
  bool quantized = false;
  int k_bits = 8, v_bits = 8, p_bits = 8;
  bool q_dynamic = false;  ///< per-(token, head) Q scale instead of q_scale.
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

/// act(gate) * up with act "silu" (gelu = false) or "gelu_tanh"; fp16 when `fp16`.
void gated_act(const float* gate, const float* up, int64_t count, bool gelu, bool fp16, float* y);
/// a + b.
void add(const float* a, const float* b, int64_t count, bool fp16, float* y);
/// x * factor.
void scale(const float* x, int64_t count, float factor, bool fp16, float* y);
/// cap * tanh(x / cap), tanh in fp64.
float softcap_value(float x, float cap);
/// softcap_value over a buffer.
void softcap(const float* x, int64_t count, float cap, bool fp16, float* y);

}  // namespace qbc::quant::fq
