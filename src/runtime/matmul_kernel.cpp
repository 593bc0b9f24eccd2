// The integer dot-product kernel (see matmul_kernel.h). The AVX2 path widens 16 weights to
// int16 per step and multiplies them with vpmaddwd (pairs of int16 products summed into
// int32: exact for these ranges), over register tiles of 4 activation rows x 2 weight rows,
// so each weight load serves several rows; the last rows (decode's single row) run 1 x 2
// tiles that prefetch the weight rows ahead. The project builds without -march flags, so the AVX2
// code is selected per call site with __builtin_cpu_supports instead of being compiled in
// everywhere.
#include "matmul_kernel.h"

#include <cstdlib>
#include <cstring>

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

/// VNNI: vpdpbusd sums four u8 x s8 products into each int32 lane (no saturation), 64
/// bytes a step; tails through masked loads (zero bytes add nothing).
///
/// Bytes ahead of the weights a single-row (decode) VNNI tile is reading that it prefetches
/// (measured in docs/performance.md; 1 KiB, 4 KiB and 8 KiB ahead gained less).
constexpr uintptr_t kVnniPrefetchAhead = 2048;
#define QBC_VNNI_TARGET __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512vnni")))

QBC_VNNI_TARGET inline __m512i load_tail(const void* p, int64_t left) {
  const __mmask64 m = left >= 64 ? ~__mmask64{0} : ((__mmask64{1} << left) - 1);
  return _mm512_maskz_loadu_epi8(m, p);
}

QBC_VNNI_TARGET inline __m256i half(__m512i a) {
  return _mm256_add_epi32(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1));
}

/// The four lane sums of a0..a3 as one vector [Σa0, Σa1, Σa2, Σa3].
QBC_VNNI_TARGET inline __m128i reduce4(__m512i a0, __m512i a1, __m512i a2, __m512i a3) {
  const __m256i h01 = _mm256_hadd_epi32(half(a0), half(a1));
  const __m256i h23 = _mm256_hadd_epi32(half(a2), half(a3));
  const __m256i h = _mm256_hadd_epi32(h01, h23);
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/// One MR x NR tile (NR 1 or a multiple of 4) of dot_u8, with the weight sums when `ws`.
template <int MR, int NR>
QBC_VNNI_TARGET void tile_vnni(const uint8_t* u, int64_t ldx, const int8_t* w, int64_t ldw,
                               int64_t len, int32_t* out, int64_t ldo, int32_t* ws) {
  __m512i acc[MR][NR], sum[NR];
  for (int j = 0; j < NR; ++j) {
    sum[j] = _mm512_setzero_si512();
    for (int i = 0; i < MR; ++i) acc[i][j] = _mm512_setzero_si512();
  }
  const __m512i ones = _mm512_set1_epi8(1);
  int64_t k = 0;
  if (MR == 1) {
    // Decode streams each weight once: row after row, so memory is read in address order
    // (the k-outer order below touches NR rows a row-length apart at every step and reads
    // memory at half the speed). The integer sums do not depend on the order.
    k = len / 64 * 64;
    for (int j = 0; j < NR; ++j) {
      const int8_t* wr = w + j * ldw;
      for (int64_t q = 0; q < k; q += 64) {
        _mm_prefetch(
            reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(wr + q) + kVnniPrefetchAhead),
            _MM_HINT_T0);  // an address past the weights is harmless
        const __m512i wv = _mm512_loadu_si512(wr + q);
        if (ws != nullptr) sum[j] = _mm512_dpbusd_epi32(sum[j], ones, wv);
        acc[0][j] = _mm512_dpbusd_epi32(acc[0][j], _mm512_loadu_si512(u + q), wv);
      }
    }
  }
  for (; k + 64 <= len; k += 64) {
    __m512i wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = _mm512_loadu_si512(w + j * ldw + k);
    if (ws != nullptr) {
      for (int j = 0; j < NR; ++j) sum[j] = _mm512_dpbusd_epi32(sum[j], ones, wv[j]);
    }
    for (int i = 0; i < MR; ++i) {
      const __m512i xv = _mm512_loadu_si512(u + i * ldx + k);
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], xv, wv[j]);
    }
  }
  if (k < len) {
    const int64_t left = len - k;
    __m512i wv[NR];
    for (int j = 0; j < NR; ++j) wv[j] = load_tail(w + j * ldw + k, left);
    if (ws != nullptr) {
      for (int j = 0; j < NR; ++j) sum[j] = _mm512_dpbusd_epi32(sum[j], ones, wv[j]);
    }
    for (int i = 0; i < MR; ++i) {
      const __m512i xv = load_tail(u + i * ldx + k, left);
      for (int j = 0; j < NR; ++j) acc[i][j] = _mm512_dpbusd_epi32(acc[i][j], xv, wv[j]);
    }
  }
  if (NR == 1) {
    for (int i = 0; i < MR; ++i) out[i * ldo] = _mm512_reduce_add_epi32(acc[i][0]);
    if (ws != nullptr) ws[0] = _mm512_reduce_add_epi32(sum[0]);
    return;
  }
  for (int j = 0; j < NR; j += 4) {
    for (int i = 0; i < MR; ++i) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i * ldo + j),
                       reduce4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]));
    }
    if (ws != nullptr) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(ws + j),
                       reduce4(sum[j], sum[j + 1], sum[j + 2], sum[j + 3]));
    }
  }
}

QBC_VNNI_TARGET void dot_u8_vnni(const uint8_t* u, int64_t ldx, int64_t rows, const int8_t* w,
                                 int64_t ldw, int64_t n, int64_t len, int32_t* out, int64_t ldo,
                                 int32_t* wsum) {
  int64_t m = 0;
  for (; m + 4 <= rows; m += 4) {
    int32_t* ws = m == 0 ? wsum : nullptr;  // the first row tile sums the weights
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
      tile_vnni<4, 4>(u + m * ldx, ldx, w + j * ldw, ldw, len, out + m * ldo + j, ldo,
                      ws != nullptr ? ws + j : nullptr);
    }
    for (; j < n; ++j) {
      tile_vnni<4, 1>(u + m * ldx, ldx, w + j * ldw, ldw, len, out + m * ldo + j, ldo,
                      ws != nullptr ? ws + j : nullptr);
    }
  }
  for (; m < rows; ++m) {
    int32_t* ws = m == 0 ? wsum : nullptr;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
      tile_vnni<1, 8>(u + m * ldx, ldx, w + j * ldw, ldw, len, out + m * ldo + j, ldo,
                      ws != nullptr ? ws + j : nullptr);
    }
    for (; j + 4 <= n; j += 4) {
      tile_vnni<1, 4>(u + m * ldx, ldx, w + j * ldw, ldw, len, out + m * ldo + j, ldo,
                      ws != nullptr ? ws + j : nullptr);
    }
    for (; j < n; ++j) {
      tile_vnni<1, 1>(u + m * ldx, ldx, w + j * ldw, ldw, len, out + m * ldo + j, ldo,
                      ws != nullptr ? ws + j : nullptr);
    }
  }
}

/// The eight int32 lane sums of v[0..7] (each __m256i one group), in order.
QBC_VNNI_TARGET inline __m256i reduce8(const __m256i* v) {
  const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                          _mm256_permute2x128_si256(a, b, 0x31));
}

/// dot_u8_groups for group 32: one 32-byte vpdpbusd per group, eight groups reduced together.
QBC_VNNI_TARGET void groups32_vnni(const uint8_t* u, int64_t ldx, int64_t rows, const int8_t* w,
                                   int64_t ldw, int64_t n, int64_t len, int32_t* out, int64_t ldo,
                                   int32_t* wsum) {
  const int64_t gt = (len + 31) / 32;
  const __m256i ones = _mm256_set1_epi8(1);
  for (int64_t j = 0; j < n; ++j) {
    const int8_t* wr = w + j * ldw;
    for (int64_t g0 = 0; g0 < gt; g0 += 8) {
      const int64_t gn = gt - g0 < 8 ? gt - g0 : 8;
      __m256i wv[8], acc[8];
      for (int i = 0; i < 8; ++i) {
        const int64_t k0 = (g0 + i) * 32;
        const int64_t left = i < gn ? (len - k0 < 32 ? len - k0 : 32) : 0;
        const __mmask32 mask = left >= 32 ? ~__mmask32{0} : (__mmask32{1} << left) - 1;
        wv[i] = _mm256_maskz_loadu_epi8(mask, wr + k0);
        acc[i] = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, wv[i]);
      }
      int32_t tmp[8];
      if (wsum != nullptr) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(tmp), reduce8(acc));
        for (int64_t i = 0; i < gn; ++i) wsum[j * gt + g0 + i] = tmp[i];
      }
      for (int64_t m = 0; m < rows; ++m) {
        const uint8_t* ur = u + m * ldx;
        for (int i = 0; i < 8; ++i) {
          const int64_t k0 = (g0 + i) * 32;
          const int64_t left = i < gn ? (len - k0 < 32 ? len - k0 : 32) : 0;
          const __mmask32 mask = left >= 32 ? ~__mmask32{0} : (__mmask32{1} << left) - 1;
          acc[i] = _mm256_dpbusd_epi32(_mm256_setzero_si256(),
                                       _mm256_maskz_loadu_epi8(mask, ur + k0), wv[i]);
        }
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(tmp), reduce8(acc));
        for (int64_t i = 0; i < gn; ++i) out[m * ldo + j * gt + g0 + i] = tmp[i];
      }
    }
  }
}

/// weighted_rows_u8 on VNNI: per 64 channels and 4 query rows, four rows of v at a time
/// interleaved into each channel's 32-bit lane (two byte unpacks, two word unpacks), so one
/// vpdpbusd against the rows' four e bytes broadcast sums four keys. Lane 4L + i of the
/// k-th interleave holds channel 16L + 4k + i; the stores put the channels back in order.
QBC_VNNI_TARGET void weighted_rows_vnni(const uint8_t* e, int64_t lde, int64_t rows,
                                        const int8_t* v, int64_t ldv, int64_t keys, int64_t width,
                                        int32_t* out, int64_t ldo) {
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t c0 = 0; c0 < width; c0 += 64) {
    const int64_t cw = width - c0 < 64 ? width - c0 : 64;
    const __mmask64 cm = cw >= 64 ? ~__mmask64{0} : (__mmask64{1} << cw) - 1;
    for (int64_t m0 = 0; m0 < rows; m0 += 4) {
      const int64_t mr = rows - m0 < 4 ? rows - m0 : 4;
      __m512i acc[4][4];
      for (auto& a : acc)
        for (__m512i& x : a) x = zero;
      for (int64_t j = 0; j < keys; j += 4) {
        const int64_t kn = keys - j < 4 ? keys - j : 4;
        __m512i r[4];
        for (int64_t t = 0; t < 4; ++t)
          r[t] = t < kn ? _mm512_maskz_loadu_epi8(cm, v + (j + t) * ldv + c0) : zero;
        const __m512i ab_lo = _mm512_unpacklo_epi8(r[0], r[1]);
        const __m512i ab_hi = _mm512_unpackhi_epi8(r[0], r[1]);
        const __m512i cd_lo = _mm512_unpacklo_epi8(r[2], r[3]);
        const __m512i cd_hi = _mm512_unpackhi_epi8(r[2], r[3]);
        const __m512i q[4] = {
            _mm512_unpacklo_epi16(ab_lo, cd_lo), _mm512_unpackhi_epi16(ab_lo, cd_lo),
            _mm512_unpacklo_epi16(ab_hi, cd_hi), _mm512_unpackhi_epi16(ab_hi, cd_hi)};
        for (int64_t m = 0; m < mr; ++m) {
          uint32_t e4 = 0;  // e[j .. j + kn) in its low bytes, zeros for missing keys
          std::memcpy(&e4, e + (m0 + m) * lde + j, static_cast<size_t>(kn));
          const __m512i eb = _mm512_set1_epi32(static_cast<int>(e4));
          for (int k = 0; k < 4; ++k) acc[m][k] = _mm512_dpbusd_epi32(acc[m][k], eb, q[k]);
        }
      }
      for (int64_t m = 0; m < mr; ++m) {
        int32_t lanes[4][16];
        for (int k = 0; k < 4; ++k) _mm512_storeu_si512(lanes[k], acc[m][k]);
        int32_t* o = out + (m0 + m) * ldo + c0;
        for (int64_t ch = 0; ch < cw; ++ch) o[ch] = lanes[(ch >> 2) & 3][(ch >> 4) * 4 + (ch & 3)];
      }
    }
  }
}

bool host_has_vnni() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
           std::getenv("QBC_EXEC_NO_VNNI") == nullptr;
  }();
  return has;
}

#endif

void dot_u8_portable(const uint8_t* u, int64_t ldx, int64_t rows, const int8_t* w, int64_t ldw,
                     int64_t n, int64_t len, int32_t* out, int64_t ldo, int32_t* wsum) {
  for (int64_t j = 0; j < n; ++j) {
    const int8_t* b = w + j * ldw;
    if (wsum != nullptr) {
      int32_t s = 0;
      for (int64_t k = 0; k < len; ++k) s += b[k];
      wsum[j] = s;
    }
    for (int64_t m = 0; m < rows; ++m) {
      const uint8_t* a = u + m * ldx;
      int32_t s = 0;
      for (int64_t k = 0; k < len; ++k) s += int32_t{a[k]} * int32_t{b[k]};
      out[m * ldo + j] = s;
    }
  }
}

void dot_u8_groups_portable(const uint8_t* u, int64_t ldx, int64_t rows, const int8_t* w,
                            int64_t ldw, int64_t n, int64_t len, int64_t group, int32_t* out,
                            int64_t ldo, int32_t* wsum) {
  const int64_t gt = (len + group - 1) / group;
  for (int64_t g = 0; g < gt; ++g) {
    const int64_t k0 = g * group, gl = len - k0 < group ? len - k0 : group;
    for (int64_t j = 0; j < n; ++j) {
      const int8_t* b = w + j * ldw + k0;
      if (wsum != nullptr) {
        int32_t s = 0;
        for (int64_t k = 0; k < gl; ++k) s += b[k];
        wsum[j * gt + g] = s;
      }
      for (int64_t m = 0; m < rows; ++m) {
        const uint8_t* a = u + m * ldx + k0;
        int32_t s = 0;
        for (int64_t k = 0; k < gl; ++k) s += int32_t{a[k]} * int32_t{b[k]};
        out[m * ldo + j * gt + g] = s;
      }
    }
  }
}

}  // namespace

bool dot_u8_fast() {
#ifdef QBC_RUNTIME_AVX2
  return host_has_vnni();
#else
  return false;
#endif
}

void dot_u8(const uint8_t* u, int64_t ldx, int64_t rows, const int8_t* w, int64_t ldw, int64_t n,
            int64_t len, int32_t* out, int64_t ldo, int32_t* wsum) {
#ifdef QBC_RUNTIME_AVX2
  if (host_has_vnni()) return dot_u8_vnni(u, ldx, rows, w, ldw, n, len, out, ldo, wsum);
#endif
  dot_u8_portable(u, ldx, rows, w, ldw, n, len, out, ldo, wsum);
}

void dot_u8_groups(const uint8_t* u, int64_t ldx, int64_t rows, const int8_t* w, int64_t ldw,
                   int64_t n, int64_t len, int64_t group, int32_t* out, int64_t ldo,
                   int32_t* wsum) {
#ifdef QBC_RUNTIME_AVX2
  if (group == 32 && host_has_vnni()) {
    return groups32_vnni(u, ldx, rows, w, ldw, n, len, out, ldo, wsum);
  }
#endif
  dot_u8_groups_portable(u, ldx, rows, w, ldw, n, len, group, out, ldo, wsum);
}

void weighted_rows_u8(const uint8_t* e, int64_t lde, int64_t rows, const int8_t* v, int64_t ldv,
                      int64_t keys, int64_t width, int32_t* out, int64_t ldo) {
#ifdef QBC_RUNTIME_AVX2
  if (host_has_vnni()) return weighted_rows_vnni(e, lde, rows, v, ldv, keys, width, out, ldo);
#endif
  for (int64_t m = 0; m < rows; ++m) {
    int32_t* o = out + m * ldo;
    for (int64_t c = 0; c < width; ++c) o[c] = 0;
    for (int64_t j = 0; j < keys; ++j) {
      const int32_t ej = e[m * lde + j];
      const int8_t* vr = v + j * ldv;
      for (int64_t c = 0; c < width; ++c) o[c] += ej * vr[c];
    }
  }
}

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
