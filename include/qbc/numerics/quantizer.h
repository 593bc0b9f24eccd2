// The quantizers of docs/numerics.md "Quantizers": symmetric codes, asymmetric codes with
// zero points, per-token activation scales (symmetric and asymmetric), and the smallest scale.
#pragma once

#include <cstdint>

namespace qbc::numerics {

/// The smallest scale any quantizer uses.
inline constexpr float kMinScale = 1e-8f;

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

/// Whether the weight scales of `bits`-bit codes in groups of `group` inputs (0: one per
/// channel) are fp16 values (docs/numerics.md "Compact grouped weights"): 4- and 8-bit groups.
bool fp16_weight_scales(int bits, int64_t group);

/// A weight scale rounded to the nearest fp16 value (round-to-nearest-even, as
/// round_fp16), its magnitude first clamped to [2^-24, 65504] (the smallest subnormal and
/// the largest finite fp16) so it is never 0 or infinite; the sign is kept.
float fp16_weight_scale(float s);

/// affine_params with the scale rounded by fp16_weight_scale before the zero point is
/// computed from it: s = fp16_weight_scale(max(fp32(span / (2^bits − 1)), 1e-8)),
/// z = clamp(rne(neg_lo / s), 0, 2^bits − 1) − 2^(bits−1).
AffineParams affine_params_fp16(double span, double neg_lo, int bits);

/// clamp(rne(x / scale) + zero, −2^(bits−1), 2^(bits−1) − 1), in fp64.
int32_t quantize_affine(double x, float scale, int32_t zero, int bits);

/// quantize_symmetric(x[i], scale, bits) for i < n (offset 0), into out: the same values,
/// computed four at a time with AVX when the host has it (the executor's activation rows).
void quantize_symmetric_row(const float* x, int64_t n, float scale, int bits, int32_t* out);

/// quantize_symmetric(x[i], scale[i], bits, offset[i]) for i < n, into out: per-channel
/// scales and offsets (the KV cache's codes), four at a time with AVX when the host has it.
void quantize_symmetric_channels(const float* x, const float* scale, const float* offset, int64_t n,
                                 int bits, int32_t* out);

/// quantize_affine(x[i], scale, zero, bits) for i < n, into out (as quantize_symmetric_row).
void quantize_affine_row(const float* x, int64_t n, float scale, int32_t zero, int bits,
                         int32_t* out);

/// A per-token dynamic scale: fp32(max_i |x[i]| / qmax(bits)), at least kMinScale.
float per_token_scale(const float* x, int64_t n, int bits);

/// The per-token asymmetric scale and zero point of x[0, n) (docs/numerics.md): [lo, hi] =
/// [min(min x, 0), max(max x, 0)], s = fp32((hi − lo) / (2^bits − 1)) (fp64 division, at
/// least kMinScale), z = clamp(rne(−lo / s), 0, 2^bits − 1) − 2^(bits−1).
void per_token_affine(const float* x, int64_t n, int bits, float* scale, int32_t* zero);

}  // namespace qbc::numerics
