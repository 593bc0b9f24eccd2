// The integer dot-product kernel (see matmul_kernel.h). The AVX2 path widens 16 weights to
// int16 per step and multiplies them with vpmaddwd (pairs of int16 products summed into
// int32: exact for these ranges), over register tiles of 4 activation rows x 2 weight rows,
// so each weight load serves several rows; the last rows (decode's single row) run 1 x 2
// tiles that prefetch the weight rows ahead. The project builds without -march flags, so the AVX2
// code is selected per call site with __builtin_cpu_supports instead of being compiled in
// everywhere.
#include "matmul_kernel.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QBC_RUNTIME_AVX2 1
#endif

namespace qbc::runtime {
namespace {

void dot_tile_portable(const int16_t* x, int64_t ldx, int64_t rows, const int8_t* w, int64_t ldw,
                       int64_t n, int64_t len, int32_t* out, int64_t ldo, int64_t jstride) {
  for (int64_t m = 0; m < rows; ++m) {
    const int16_t* a = x + m * ldx;
    for (int64_t j = 0; j < n; ++j) {
      const int8_t* b = w + j * ldw;
      int32_t s = 0;
      for (int64_t k = 0; k < len; ++k) s += int32_t{a[k]} * int32_t{b[k]};
      out[m * ldo + j * jstride] = s;
    }
  }
}

#ifdef QBC_RUNTIME_AVX2

__attribute__((target("avx2"))) inline int32_t hsum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

/// Bytes ahead of the current weight rows that a single-row tile prefetches: decode
/// streams its weights once, and the hardware prefetcher alone leaves half the memory
/// bandwidth unused on short rows.
constexpr int64_t kPrefetchAhead = 4096;

/// One MR x NR register tile: rows x[0..MR) against weight rows w[0..NR).
template <int MR, int NR>
__attribute__((target("avx2"))) void tile(const int16_t* x, int64_t ldx, const int8_t* w,
                                          int64_t ldw, int64_t len, int32_t* out, int64_t ldo,
                                          int64_t jstride) {
  if (MR == 1) {  // the same columns of the rows about kPrefetchAhead bytes further on
    const int64_t ahead = (kPrefetchAhead + ldw - 1) / ldw * ldw;
    for (int j = 0; j < NR; ++j) {
      for (int64_t p = 0; p < len; p += 64)
        _mm_prefetch(
            reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(w) + ahead + j * ldw + p),
            _MM_HINT_T0);  // an address past the weights is harmless
    }
  }
  __m256i acc[MR][NR];
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) acc[i][j] = _mm256_setzero_si256();
  }
  int64_t k = 0;
  for (; k + 16 <= len; k += 16) {
    __m256i wv[NR];
    for (int j = 0; j < NR; ++j) {
      wv[j] =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + j * ldw + k)));
    }
    for (int i = 0; i < MR; ++i) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i * ldx + k));
      for (int j = 0; j < NR; ++j)
        acc[i][j] = _mm256_add_epi32(acc[i][j], _mm256_madd_epi16(xv, wv[j]));
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      int32_t s = hsum(acc[i][j]);
      for (int64_t t = k; t < len; ++t) s += int32_t{x[i * ldx + t]} * int32_t{w[j * ldw + t]};
      out[i * ldo + j * jstride] = s;
    }
  }
}

__attribute__((target("avx2"))) void dot_tile_avx2(const int16_t* x, int64_t ldx, int64_t rows,
                                                   const int8_t* w, int64_t ldw, int64_t n,
                                                   int64_t len, int32_t* out, int64_t ldo,
                                                   int64_t jstride) {
  int64_t m = 0;
  for (; m + 4 <= rows; m += 4) {
    int64_t j = 0;
    for (; j + 2 <= n; j += 2) {
      tile<4, 2>(x + m * ldx, ldx, w + j * ldw, ldw, len, out + m * ldo + j * jstride, ldo,
                 jstride);
    }
    for (; j < n; ++j) {
      tile<4, 1>(x + m * ldx, ldx, w + j * ldw, ldw, len, out + m * ldo + j * jstride, ldo,
                 jstride);
    }
  }
  for (; m < rows; ++m) {
    int64_t j = 0;
    for (; j + 2 <= n; j += 2) {
      tile<1, 2>(x + m * ldx, ldx, w + j * ldw, ldw, len, out + m * ldo + j * jstride, ldo,
                 jstride);
    }
    for (; j < n; ++j) {
      tile<1, 1>(x + m * ldx, ldx, w + j * ldw, ldw, len, out + m * ldo + j * jstride, ldo,
                 jstride);
    }
  }
}

bool host_has_avx2() {
  static const bool has = [] {
    __builtin_cpu_init();  // safe to call early (static initialisation order)
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return has;
}

#endif

}  // namespace

bool dot_tile_uses_avx2() {
#ifdef QBC_RUNTIME_AVX2
  return host_has_avx2();
#else
  return false;
#endif
}

void dot_tile(const int16_t* x, int64_t ldx, int64_t rows, const int8_t* w, int64_t ldw, int64_t n,
              int64_t len, int32_t* out, int64_t ldo, int64_t jstride) {
#ifdef QBC_RUNTIME_AVX2
  if (host_has_avx2()) return dot_tile_avx2(x, ldx, rows, w, ldw, n, len, out, ldo, jstride);
#endif
  dot_tile_portable(x, ldx, rows, w, ldw, n, len, out, ldo, jstride);
}

}  // namespace qbc::runtime
