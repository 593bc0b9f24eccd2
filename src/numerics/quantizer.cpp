// The quantizers (see qbc/numerics/quantizer.h).
#include "qbc/numerics/quantizer.h"

#include <algorithm>
#include <cmath>

#include "qbc/numerics/fp16.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QBC_NUMERICS_AVX 1
#endif

namespace qbc::numerics {

int64_t quant_max(int bits) { return (int64_t{1} << (bits - 1)) - 1; }

int32_t quantize_symmetric(double x, float scale, int bits, float offset) {
  const double q = std::nearbyint((x - static_cast<double>(offset)) / static_cast<double>(scale));
  const double hi = static_cast<double>(quant_max(bits));
  if (std::isnan(q)) return 0;
  return static_cast<int32_t>(std::min(std::max(q, -hi - 1.0), hi));
}

AffineParams affine_params(double span, double neg_lo, int bits) {
  const double levels = static_cast<double>((int64_t{1} << bits) - 1);
  AffineParams a;
  a.scale = std::max(static_cast<float>(span / levels), 1e-8f);
  const double zu =
      std::min(std::max(std::nearbyint(neg_lo / static_cast<double>(a.scale)), 0.0), levels);
  a.zero = static_cast<int32_t>(zu) - static_cast<int32_t>(quant_max(bits) + 1);
  return a;
}

bool fp16_weight_scales(int bits, int64_t group) { return (bits == 4 || bits == 8) && group > 0; }

float fp16_weight_scale(float s) {
  const double m = std::min(std::max(std::fabs(static_cast<double>(s)), 0x1p-24), 65504.0);
  const float r = round_fp16(m);
  return std::signbit(s) ? -r : r;
}

AffineParams affine_params_fp16(double span, double neg_lo, int bits) {
  const double levels = static_cast<double>((int64_t{1} << bits) - 1);
  AffineParams a;
  a.scale = fp16_weight_scale(std::max(static_cast<float>(span / levels), 1e-8f));
  const double zu =
      std::min(std::max(std::nearbyint(neg_lo / static_cast<double>(a.scale)), 0.0), levels);
  a.zero = static_cast<int32_t>(zu) - static_cast<int32_t>(quant_max(bits) + 1);
  return a;
}

float per_token_scale(const float* x, int64_t n, int bits) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return std::max(static_cast<float>(static_cast<double>(m) / static_cast<double>(quant_max(bits))),
                  kMinScale);
}

namespace {
void row_min_max(const float* x, int64_t n, float* lo, float* hi);
}  // namespace

void per_token_affine(const float* x, int64_t n, int bits, float* scale, int32_t* zero) {
  float lo = 0.0f, hi = 0.0f;
  row_min_max(x, n, &lo, &hi);
  const AffineParams a = affine_params(static_cast<double>(hi) - static_cast<double>(lo),
                                       -static_cast<double>(lo), bits);
  *scale = a.scale;
  *zero = a.zero;
}

int32_t quantize_affine(double x, float scale, int32_t zero, int bits) {
  const double q = std::nearbyint(x / static_cast<double>(scale)) + zero;
  const double hi = static_cast<double>(quant_max(bits));
  if (std::isnan(q)) return zero;
  return static_cast<int32_t>(std::min(std::max(q, -hi - 1.0), hi));
}

namespace {

#ifdef QBC_NUMERICS_AVX

bool host_has_avx() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") != 0;
  }();
  return has;
}

/// The scalar rules four at a time: fp64 division by the fp32 scale, round half to even
/// (nearbyint in the default rounding mode), + zero, clamp, NaN -> `nan_code`. Every step
/// is the same IEEE operation as in the scalar functions.
__attribute__((target("avx"))) int64_t quantize_row_avx(const float* x, int64_t n, float scale,
                                                        int32_t zero, int bits, int32_t nan_code,
                                                        int32_t* out) {
  const double hi = static_cast<double>(quant_max(bits));
  const __m256d s = _mm256_set1_pd(static_cast<double>(scale));
  const __m256d z = _mm256_set1_pd(static_cast<double>(zero));
  const __m256d lo_v = _mm256_set1_pd(-hi - 1.0), hi_v = _mm256_set1_pd(hi);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d xd = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
    __m256d q =
        _mm256_round_pd(_mm256_div_pd(xd, s), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    q = _mm256_add_pd(q, z);
    const int nan = _mm256_movemask_pd(_mm256_cmp_pd(q, q, _CMP_UNORD_Q));
    q = _mm256_min_pd(_mm256_max_pd(q, lo_v), hi_v);  // std::min(std::max(q, lo), hi)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvttpd_epi32(q));
    for (int l = 0; nan != 0 && l < 4; ++l) {
      if (nan & (1 << l)) out[i + l] = nan_code;
    }
  }
  return i;
}

/// quantize_symmetric_channels four lanes a step: fp64(x) − fp64(offset), divided by
/// fp64(scale), round half to even, clamp, NaN -> 0, as quantize_symmetric.
__attribute__((target("avx"))) int64_t quantize_channels_avx(const float* x, const float* scale,
                                                             const float* offset, int64_t n,
                                                             int bits, int32_t* out) {
  const double hi = static_cast<double>(quant_max(bits));
  const __m256d lo_v = _mm256_set1_pd(-hi - 1.0), hi_v = _mm256_set1_pd(hi);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d xd = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)),
                                     _mm256_cvtps_pd(_mm_loadu_ps(offset + i)));
    __m256d q = _mm256_round_pd(_mm256_div_pd(xd, _mm256_cvtps_pd(_mm_loadu_ps(scale + i))),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const int nan = _mm256_movemask_pd(_mm256_cmp_pd(q, q, _CMP_UNORD_Q));
    q = _mm256_min_pd(_mm256_max_pd(q, lo_v), hi_v);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvttpd_epi32(q));
    for (int l = 0; nan != 0 && l < 4; ++l) {
      if (nan & (1 << l)) out[i + l] = 0;
    }
  }
  return i;
}

/// row_min_max eight lanes at a time: minps(x, lo) is x < lo ? x : lo and maxps(x, hi) is
/// x > hi ? x : hi, std::min(lo, x) and std::max(hi, x) exactly. Every lane starts at the
/// running value and holds it or a value strictly beyond it (a NaN, or an equal value such as
/// -0 against +0, never replaces a lane), so merging them in any order gives the sequential
/// loop's result.
__attribute__((target("avx"))) int64_t min_max_avx(const float* x, int64_t n, float* lo,
                                                   float* hi) {
  __m256 l = _mm256_set1_ps(*lo), h = _mm256_set1_ps(*hi);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    l = _mm256_min_ps(v, l);
    h = _mm256_max_ps(v, h);
  }
  float ls[8], hs[8];
  _mm256_storeu_ps(ls, l);
  _mm256_storeu_ps(hs, h);
  for (int k = 0; k < 8; ++k) {
    *lo = std::min(*lo, ls[k]);
    *hi = std::max(*hi, hs[k]);
  }
  return i;
}

#endif

/// lo = min(lo, x[i]) and hi = max(hi, x[i]) over the row, as std::min / std::max in order.
void row_min_max(const float* x, int64_t n, float* lo, float* hi) {
  int64_t i = 0;
#ifdef QBC_NUMERICS_AVX
  if (host_has_avx()) i = min_max_avx(x, n, lo, hi);
#endif
  for (; i < n; ++i) {
    *lo = std::min(*lo, x[i]);
    *hi = std::max(*hi, x[i]);
  }
}

}  // namespace

void quantize_symmetric_row(const float* x, int64_t n, float scale, int bits, int32_t* out) {
  int64_t i = 0;
#ifdef QBC_NUMERICS_AVX
  if (host_has_avx()) i = quantize_row_avx(x, n, scale, 0, bits, 0, out);
#endif
  for (; i < n; ++i) out[i] = quantize_symmetric(x[i], scale, bits);
}

void quantize_symmetric_channels(const float* x, const float* scale, const float* offset, int64_t n,
                                 int bits, int32_t* out) {
  int64_t i = 0;
#ifdef QBC_NUMERICS_AVX
  if (host_has_avx()) i = quantize_channels_avx(x, scale, offset, n, bits, out);
#endif
  for (; i < n; ++i) out[i] = quantize_symmetric(x[i], scale[i], bits, offset[i]);
}

void quantize_affine_row(const float* x, int64_t n, float scale, int32_t zero, int bits,
                         int32_t* out) {
  int64_t i = 0;
#ifdef QBC_NUMERICS_AVX
  if (host_has_avx()) i = quantize_row_avx(x, n, scale, zero, bits, zero, out);
#endif
  for (; i < n; ++i) out[i] = quantize_affine(x[i], scale, zero, bits);
}

}  // namespace qbc::numerics
