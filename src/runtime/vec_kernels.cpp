// Vector loops of the executor (see vec_kernels.h). The AVX variants are compiled with a
// target attribute and picked at run time, as in matmul_kernel.cpp; each lane computes one
// element exactly as the scalar loop does (separate multiply and add instructions).
#include "vec_kernels.h"

#include <cstdlib>
#include <cstring>

#include "fp16_rows.h"
#include "qbc/numerics/fp16.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QBC_RUNTIME_AVX 1
#endif

namespace qbc::runtime {
namespace {

void rot_corrections_portable(const float* q, const float* kt, int64_t ld, int64_t hd, int64_t j0,
                              int64_t n, float* corr) {
  for (int64_t j = j0; j < n; ++j) {
    float s = 0.0f;
    for (int64_t c = 0; c < hd; ++c) s += q[c] * kt[c * ld + j];
    corr[j] = s;
  }
}

void sum_groups_portable(const float* part, int64_t j0, int64_t n, int64_t gt, const float* fsum,
                         float* v) {
  if (fsum != nullptr) {
    for (int64_t j = j0; j < n; ++j) v[j] = fsum[j] + part[j * gt];
  } else {
    for (int64_t j = j0; j < n; ++j) v[j] = part[j * gt];
  }
  for (int64_t g = 1; g < gt; ++g) {  // channels inner: independent adds
    for (int64_t j = j0; j < n; ++j) v[j] = v[j] + part[j * gt + g];
  }
}

/// One part of grouped_requant, as the scalar expression.
inline float requant_part(int32_t a, float xm, float w, const float* xsf, const float* wm_j,
                          int64_t g) {
  float p = static_cast<float>(a) * (xm * w);
  if (wm_j != nullptr) p = p + xsf[g] * (xm * wm_j[g]);
  return p;
}

/// Scale i of a grouped requant: fp32, or (kHalf) IEEE binary16 bits at any alignment, widened
/// exactly.
template <bool kHalf>
float scale_at(const void* ws, int64_t i) {
  if constexpr (kHalf) {
    uint16_t h;
    std::memcpy(&h, static_cast<const uint8_t*>(ws) + 2 * i, sizeof h);
    return numerics::fp16_from_bits(h);
  } else {
    return static_cast<const float*>(ws)[i];
  }
}

/// grouped_requant's channels [j0, n) one element at a time (the scalar definition).
template <bool kHalf>
void grouped_requant_portable(const int32_t* acc, int64_t j0, int64_t n, int64_t gt, float xm,
                              const void* ws, int64_t ws_stride, const float* xsf, const float* wm,
                              const float* fsum, float* v) {
  for (int64_t j = j0; j < n; ++j) {
    const int32_t* aj = acc + j * gt;
    const float* mj = wm != nullptr ? wm + j * ws_stride : nullptr;
    float s = requant_part(aj[0], xm, scale_at<kHalf>(ws, j * ws_stride), xsf, mj, 0);
    if (fsum != nullptr) s = fsum[j] + s;
    for (int64_t g = 1; g < gt; ++g)
      s = s + requant_part(aj[g], xm, scale_at<kHalf>(ws, j * ws_stride + g), xsf, mj, g);
    v[j] = s;
  }
}

/// One element of group_corrections, modulo 2^32.
inline void correct_one(const int32_t* dots, const int32_t* ts, const uint32_t* off,
                        const uint32_t* xs, uint32_t xz, int64_t e, int64_t g, bool accumulate,
                        int32_t* out) {
  uint32_t v = static_cast<uint32_t>(dots[e]) - xz * static_cast<uint32_t>(ts[e]);
  if (off != nullptr) v -= off[e] * xs[g];
  if (accumulate) v += static_cast<uint32_t>(out[e]);
  out[e] = static_cast<int32_t>(v);
}

void group_corrections_portable(const int32_t* dots, const int32_t* ts, const uint32_t* off,
                                const uint32_t* xs, uint32_t xz, int64_t i0, int64_t n, int64_t gt,
                                bool accumulate, int32_t* out) {
  for (int64_t i = i0; i < n; ++i) {
    for (int64_t g = 0; g < gt; ++g) {
      const int64_t e = i * gt + g;
      correct_one(dots, ts, off, xs, xz, e, g, accumulate, out);
    }
  }
}

void scale_round_fp16_portable(const float* x, double r, const double* w, int64_t i0, int64_t n,
                               uint16_t* y) {
  for (int64_t i = i0; i < n; ++i)
    y[i] = numerics::round_fp16_bits(static_cast<double>(x[i]) * r * w[i]);
}

#ifdef QBC_RUNTIME_AVX

/// Transposes the 8 x 8 floats of r in place: r[k] becomes lane k of every input row.
__attribute__((target("avx2"))) inline void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/// s = s + col, or for the first column s = fsum[j..j+8) + col (or col).
__attribute__((target("avx2"))) inline void add_column(__m256 col, const float* fsum, int64_t j,
                                                       bool* first, __m256* s) {
  if (!*first) {
    *s = _mm256_add_ps(*s, col);
  } else {
    *s = fsum != nullptr ? _mm256_add_ps(_mm256_loadu_ps(fsum + j), col) : col;
    *first = false;
  }
}

/// Eight channels a step: each block of 8 groups of the 8 rows is loaded and transposed in
/// registers, so lane i adds channel j + i's groups in order with plain vector adds.
__attribute__((target("avx2"))) void sum_groups_avx2(const float* part, int64_t n, int64_t gt,
                                                     const float* fsum, float* v) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const float* p = part + j * gt;
    __m256 s = _mm256_setzero_ps();
    bool first = true;
    int64_t g = 0;
    for (; g + 8 <= gt; g += 8) {
      __m256 r[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(p + i * gt + g);
      transpose8(r);
      for (int k = 0; k < 8; ++k) add_column(r[k], fsum, j, &first, &s);
    }
    for (; g < gt; ++g)
      add_column(_mm256_setr_ps(p[g], p[gt + g], p[2 * gt + g], p[3 * gt + g], p[4 * gt + g],
                                p[5 * gt + g], p[6 * gt + g], p[7 * gt + g]),
                 fsum, j, &first, &s);
    _mm256_storeu_ps(v + j, s);
  }
  sum_groups_portable(part, j, n, gt, fsum, v);
}

/// Eight scales from element i: fp32, or (kHalf) IEEE binary16 bits widened exactly.
template <bool kHalf>
__attribute__((target("avx2,f16c"))) inline __m256 load_scales(const void* ws, int64_t i) {
  if constexpr (kHalf) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint8_t*>(ws) + 2 * i)));
  } else {
    return _mm256_loadu_ps(static_cast<const float*>(ws) + i);
  }
}

/// The first `left` (< 8) scales from element i (the lanes after them are not used). fp32:
/// a masked load. binary16: a whole 16-byte load while it stays inside the `count` scales,
/// else (the buffer's last row) through a zeroed copy.
template <bool kHalf>
__attribute__((target("avx2,f16c"))) inline __m256 load_scales_part(const void* ws, int64_t i,
                                                                    int64_t left, int64_t count,
                                                                    __m256i mask) {
  if constexpr (kHalf) {
    if (i + 8 <= count) return load_scales<true>(ws, i);
    uint16_t h[8] = {};
    std::memcpy(h, static_cast<const uint8_t*>(ws) + 2 * i, static_cast<size_t>(2 * left));
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
  } else {
    (void)left;
    (void)count;
    return _mm256_maskload_ps(static_cast<const float*>(ws) + i, mask);
  }
}

/// The parts of rows j .. j + 8, groups g .. g + 8 of a grouped requant, transposed (r[k]:
/// group g + k of each row).
template <bool kHalf>
__attribute__((target("avx2,f16c"))) inline void requant_block(const int32_t* acc, int64_t gt,
                                                               __m256 xmv, const void* ws,
                                                               int64_t ws_stride, const float* xsf,
                                                               const float* wm, int64_t j,
                                                               int64_t g, __m256 r[8]) {
  for (int i = 0; i < 8; ++i) {
    const int64_t row = j + i, at = row * ws_stride + g;
    const __m256 a = _mm256_cvtepi32_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + row * gt + g)));
    __m256 p = _mm256_mul_ps(a, _mm256_mul_ps(xmv, load_scales<kHalf>(ws, at)));
    if (wm != nullptr) {  // float offsets (fp32 only)
      const __m256 m = _mm256_mul_ps(xmv, _mm256_loadu_ps(wm + at));
      p = _mm256_add_ps(p, _mm256_mul_ps(_mm256_loadu_ps(xsf + g), m));
    }
    r[i] = p;
  }
  transpose8(r);
}

/// requant_block for the last left < 8 groups: masked loads (the lanes after them are not
/// added by the caller).
template <bool kHalf>
__attribute__((target("avx2,f16c"))) inline void requant_tail(
    const int32_t* acc, int64_t gt, __m256 xmv, const void* ws, int64_t ws_stride, int64_t count,
    const float* xsf, const float* wm, int64_t j, int64_t g, int64_t left, __m256 r[8]) {
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)),
                                          _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  for (int i = 0; i < 8; ++i) {
    const int64_t row = j + i, at = row * ws_stride + g;
    const __m256 a = _mm256_cvtepi32_ps(_mm256_maskload_epi32(acc + row * gt + g, mask));
    __m256 p =
        _mm256_mul_ps(a, _mm256_mul_ps(xmv, load_scales_part<kHalf>(ws, at, left, count, mask)));
    if (wm != nullptr) {
      const __m256 m = _mm256_mul_ps(xmv, _mm256_maskload_ps(wm + at, mask));
      p = _mm256_add_ps(p, _mm256_mul_ps(_mm256_maskload_ps(xsf + g, mask), m));
    }
    r[i] = p;
  }
  transpose8(r);
}

/// grouped_requant, 8 channels a step: the parts of 8 rows x 8 groups are formed row-wise
/// (each lane one element, the scalar expression), transposed, and added column by column.
/// The last gt mod 8 groups take masked loads through the same block, adding only their
/// columns. Scales fp32 or (kHalf) binary16 bits, `count` of them.
template <bool kHalf>
__attribute__((target("avx2,f16c"))) void grouped_requant_avx2(const int32_t* acc, int64_t n,
                                                               int64_t gt, float xm, const void* ws,
                                                               int64_t ws_stride, int64_t count,
                                                               const float* xsf, const float* wm,
                                                               const float* fsum, float* v) {
  const __m256 xmv = _mm256_set1_ps(xm);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 s = _mm256_setzero_ps();
    bool first = true;
    int64_t g = 0;
    __m256 r[8];
    for (; g + 8 <= gt; g += 8) {
      requant_block<kHalf>(acc, gt, xmv, ws, ws_stride, xsf, wm, j, g, r);
      for (int k = 0; k < 8; ++k) add_column(r[k], fsum, j, &first, &s);
    }
    if (g < gt) {
      requant_tail<kHalf>(acc, gt, xmv, ws, ws_stride, count, xsf, wm, j, g, gt - g, r);
      for (int64_t k = 0; k < gt - g; ++k) add_column(r[k], fsum, j, &first, &s);  // real groups
    }
    _mm256_storeu_ps(v + j, s);
  }
  grouped_requant_portable<kHalf>(acc, j, n, gt, xm, ws, ws_stride, xsf, wm, fsum, v);
}

/// group_corrections, 8 groups of a channel a step (wrapping 32-bit lanes), the last few
/// groups of each channel in the scalar loop.
__attribute__((target("avx2"))) void group_corrections_avx2(const int32_t* dots, const int32_t* ts,
                                                            const uint32_t* off, const uint32_t* xs,
                                                            uint32_t xz, int64_t n, int64_t gt,
                                                            bool accumulate, int32_t* out) {
  const __m256i xzv = _mm256_set1_epi32(static_cast<int32_t>(xz));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t e0 = i * gt;
    int64_t g = 0;
    for (; g + 8 <= gt; g += 8) {
      const int64_t e = e0 + g;
      __m256i v = _mm256_sub_epi32(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(dots + e)),
          _mm256_mullo_epi32(xzv, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ts + e))));
      if (off != nullptr)
        v = _mm256_sub_epi32(
            v, _mm256_mullo_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(off + e)),
                                  _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xs + g))));
      if (accumulate)
        v = _mm256_add_epi32(v, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(out + e)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + e), v);
    }
    for (; g < gt; ++g) {
      const int64_t e = e0 + g;
      correct_one(dots, ts, off, xs, xz, e, g, accumulate, out);
    }
  }
}

/// round_fp16_bits of the four fp64 lanes of d into y[0..3]: its fast path on the fp64 bits
/// (a normal fp16 result, or the carry out of the top binade into infinity); a step with any
/// other lane goes through the scalar function.
__attribute__((target("avx2"))) inline void round_fp16_4(__m256d d, uint16_t* y) {
  const __m256i exp_mask = _mm256_set1_epi64x(0x7FF),
                mant = _mm256_set1_epi64x((int64_t{1} << 52) - 1);
  const __m256i rest_mask = _mm256_set1_epi64x((int64_t{1} << 42) - 1);
  const __m256i half = _mm256_set1_epi64x(int64_t{1} << 41), one = _mm256_set1_epi64x(1);
  const __m256i lo = _mm256_set1_epi64x(1023 - 14 - 1), hi = _mm256_set1_epi64x(1023 + 15 + 1);
  const __m256i u = _mm256_castpd_si256(d);
  const __m256i be = _mm256_and_si256(_mm256_srli_epi64(u, 52), exp_mask);  // biased exponent
  const __m256i ok = _mm256_and_si256(_mm256_cmpgt_epi64(be, lo), _mm256_cmpgt_epi64(hi, be));
  if (_mm256_movemask_pd(_mm256_castsi256_pd(ok)) != 0xF) {
    double v[4];
    _mm256_storeu_pd(v, d);
    for (int k = 0; k < 4; ++k) y[k] = numerics::round_fp16_bits(v[k]);
    return;
  }
  const __m256i m = _mm256_and_si256(u, mant);
  // h = (e + 15) << 10 | m >> 42, with e + 15 = be - 1008.
  __m256i h = _mm256_or_si256(_mm256_slli_epi64(_mm256_sub_epi64(be, _mm256_set1_epi64x(1008)), 10),
                              _mm256_srli_epi64(m, 42));
  const __m256i rest = _mm256_and_si256(m, rest_mask);
  const __m256i up =
      _mm256_or_si256(_mm256_cmpgt_epi64(rest, half),
                      _mm256_and_si256(_mm256_cmpeq_epi64(rest, half),
                                       _mm256_cmpeq_epi64(_mm256_and_si256(h, one), one)));
  h = _mm256_sub_epi64(h, up);  // up is all ones (-1) where the value rounds up
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi64(u, 48), _mm256_set1_epi64x(0x8000));
  alignas(32) int64_t out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), _mm256_or_si256(sign, h));
  for (int k = 0; k < 4; ++k) y[k] = static_cast<uint16_t>(out[k]);
}

/// scale_round_fp16, four lanes a step (round_fp16_4 of the fp64 products).
__attribute__((target("avx2"))) void scale_round_fp16_avx2(const float* x, double r,
                                                           const double* w, int64_t n,
                                                           uint16_t* y) {
  const __m256d rv = _mm256_set1_pd(r);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    round_fp16_4(_mm256_mul_pd(_mm256_mul_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)), rv),
                               _mm256_loadu_pd(w + i)),
                 y + i);
  }
  scale_round_fp16_portable(x, r, w, i, n, y);
}

/// round_fp16_rows, four lanes a step.
__attribute__((target("avx2"))) int64_t round_fp16_rows_avx2(const double* v, int64_t n,
                                                             uint16_t* y) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) round_fp16_4(_mm256_loadu_pd(v + i), y + i);
  return i;
}

__attribute__((target("avx2"))) void rot_corrections_avx2(const float* q, const float* kt,
                                                          int64_t ld, int64_t hd, int64_t n,
                                                          float* corr) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    for (int64_t c = 0; c < hd; ++c) {
      const __m256 qc = _mm256_set1_ps(q[c]);
      const float* row = kt + c * ld + j;
      a = _mm256_add_ps(a, _mm256_mul_ps(qc, _mm256_loadu_ps(row)));
      b = _mm256_add_ps(b, _mm256_mul_ps(qc, _mm256_loadu_ps(row + 8)));
    }
    _mm256_storeu_ps(corr + j, a);
    _mm256_storeu_ps(corr + j + 8, b);
  }
  for (; j + 8 <= n; j += 8) {
    __m256 a = _mm256_setzero_ps();
    for (int64_t c = 0; c < hd; ++c)
      a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_set1_ps(q[c]), _mm256_loadu_ps(kt + c * ld + j)));
    _mm256_storeu_ps(corr + j, a);
  }
  rot_corrections_portable(q, kt, ld, hd, j, n, corr);
}

#endif

}  // namespace

bool cpu_has_avx2() {
#ifdef QBC_RUNTIME_AVX
  static const bool has = [] {
    __builtin_cpu_init();  // safe to call early (static initialisation order)
    // QBC_EXEC_NO_AVX2 tests the portable loops on an AVX2 host, as for the int4 kernel.
    return __builtin_cpu_supports("avx2") != 0 && std::getenv("QBC_EXEC_NO_AVX2") == nullptr;
  }();
  return has;
#else
  return false;
#endif
}

void rot_corrections(const float* q, const float* kt, int64_t ld, int64_t hd, int64_t n,
                     float* corr) {
#ifdef QBC_RUNTIME_AVX
  if (cpu_has_avx2()) return rot_corrections_avx2(q, kt, ld, hd, n, corr);
#endif
  rot_corrections_portable(q, kt, ld, hd, 0, n, corr);
}

void sum_groups(const float* part, int64_t n, int64_t gt, const float* fsum, float* v) {
#ifdef QBC_RUNTIME_AVX
  if (cpu_has_avx2()) return sum_groups_avx2(part, n, gt, fsum, v);
#endif
  sum_groups_portable(part, 0, n, gt, fsum, v);
}

void grouped_requant(const int32_t* acc, int64_t n, int64_t gt, float xm, const float* ws,
                     int64_t ws_stride, const float* xsf, const float* wm, const float* fsum,
                     float* v) {
#ifdef QBC_RUNTIME_AVX
  if (cpu_has_avx2() && fp16_rows_use_f16c()) {
    const int64_t count = (n - 1) * ws_stride + gt;
    return grouped_requant_avx2<false>(acc, n, gt, xm, ws, ws_stride, count, xsf, wm, fsum, v);
  }
#endif
  grouped_requant_portable<false>(acc, 0, n, gt, xm, ws, ws_stride, xsf, wm, fsum, v);
}

void grouped_requant_f16(const int32_t* acc, int64_t n, int64_t gt, float xm, const uint8_t* ws,
                         int64_t ws_stride, const float* fsum, float* v) {
#ifdef QBC_RUNTIME_AVX
  if (cpu_has_avx2() && fp16_rows_use_f16c()) {
    const int64_t count = (n - 1) * ws_stride + gt;
    return grouped_requant_avx2<true>(acc, n, gt, xm, ws, ws_stride, count, nullptr, nullptr, fsum,
                                      v);
  }
#endif
  grouped_requant_portable<true>(acc, 0, n, gt, xm, ws, ws_stride, nullptr, nullptr, fsum, v);
}

void group_corrections(const int32_t* dots, const int32_t* ts, const uint32_t* off,
                       const uint32_t* xs, uint32_t xz, int64_t n, int64_t gt, bool accumulate,
                       int32_t* out) {
#ifdef QBC_RUNTIME_AVX
  if (cpu_has_avx2()) return group_corrections_avx2(dots, ts, off, xs, xz, n, gt, accumulate, out);
#endif
  group_corrections_portable(dots, ts, off, xs, xz, 0, n, gt, accumulate, out);
}

void scale_round_fp16(const float* x, double r, const double* w, int64_t n, uint16_t* y) {
#ifdef QBC_RUNTIME_AVX
  if (cpu_has_avx2()) return scale_round_fp16_avx2(x, r, w, n, y);
#endif
  scale_round_fp16_portable(x, r, w, 0, n, y);
}

void round_fp16_rows(const double* v, int64_t n, uint16_t* y) {
  int64_t i = 0;
#ifdef QBC_RUNTIME_AVX
  if (cpu_has_avx2()) i = round_fp16_rows_avx2(v, n, y);
#endif
  for (; i < n; ++i) y[i] = numerics::round_fp16_bits(v[i]);
}

}  // namespace qbc::runtime
