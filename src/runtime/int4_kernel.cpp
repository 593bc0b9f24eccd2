// The int4 weight kernel (see int4_kernel.h). The SIMD paths xor each packed byte with 0x88,
// which turns both signed nibbles w into t = w + 8 in [0, 15], split it into its low nibbles
// (the even codes) and high nibbles (the odd codes), and multiply them as unsigned bytes with
// the signed activation codes: no unpacked weight copy, no sign extension. The activations
// are reordered once per call to match (per chunk of C codes: its C/2 even codes, then its C/2
// odd ones, zero-padded to whole chunks), so a chunk's low nibbles meet its even codes. A
// 32-code block is one 128-bit lane: its four int32 lanes sum to the block's dot product, and
// the lanes of 16 (VNNI) or 8 (AVX2) blocks are reduced together with unpacks and one
// permute. Groups of 32 r codes add r block sums. The project builds without -march flags, so
// the SIMD functions carry target attributes and are chosen at run time.
#include "int4_kernel.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QBC_I4_SIMD 1
#endif

namespace qbc::runtime {
namespace {

constexpr int64_t kBlock = 32;  ///< codes a block (one 128-bit lane of products)

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// t = w + 8 of code k in a packed row.
inline int32_t offset_code(const uint8_t* row, int64_t k) {
  const uint8_t b = row[k / 2];
  return ((k % 2 == 0 ? b : b >> 4) & 0xF) ^ 8;
}

void i4_portable(const int8_t* x, int64_t ldx, int64_t rows, const uint8_t* w, int64_t ldw,
                 int64_t n, int64_t len, int64_t group, int32_t* out, int64_t ldo, int32_t* tsum) {
  const int64_t gt = ceil_div(len, group);
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* wr = w + j * ldw;
    for (int64_t g = 0; g < gt; ++g) {
      const int64_t k0 = g * group, k1 = std::min(len, k0 + group);
      if (tsum != nullptr) {
        int32_t s = 0;
        for (int64_t k = k0; k < k1; ++k) s += offset_code(wr, k);
        tsum[j * gt + g] = s;
      }
      for (int64_t m = 0; m < rows; ++m) {
        const int8_t* xr = x + m * ldx;
        int32_t s = 0;
        for (int64_t k = k0; k < k1; ++k) s += int32_t{xr[k]} * offset_code(wr, k);
        out[m * ldo + j * gt + g] = s;
      }
    }
  }
}

/// A per-thread scratch buffer that keeps its memory between calls.
template <typename T, int Tag>
T* scratch(size_t n) {
  thread_local std::vector<T> v;
  if (v.size() < n) v.resize(n);
  return v.data();
}

/// Rows [rows, len] of x reordered per chunk of `c` codes (even codes, then odd codes),
/// zero-padded to whole chunks: rows of ceil(len / c) * c bytes.
const int8_t* reorder_x(const int8_t* x, int64_t ldx, int64_t rows, int64_t len, int64_t c) {
  const int64_t padded = ceil_div(len, c) * c, half = c / 2;
  int8_t* xd = scratch<int8_t, 0>(static_cast<size_t>(rows * padded));
  for (int64_t m = 0; m < rows; ++m) {
    const int8_t* s = x + m * ldx;
    int8_t* d = xd + m * padded;
    // Chunk by chunk (no division per code); only the padding of the last chunk is cleared.
    for (int64_t c0 = 0; c0 < len; c0 += c) {
      const int64_t pairs = std::min(c, len - c0) / 2;
      int8_t* de = d + c0;
      int8_t* dd = d + c0 + half;
      const int8_t* sc = s + c0;
      for (int64_t i = 0; i < pairs; ++i) {
        de[i] = sc[2 * i];
        dd[i] = sc[2 * i + 1];
      }
      if (pairs < half) {
        std::fill(de + pairs, de + half, int8_t{0});
        std::fill(dd + pairs, dd + half, int8_t{0});
      }
    }
  }
  return xd;
}

/// Block sums bs[r * nb + b] (rows r < count, nb blocks) into grouped sums out[r * ldo + g]
/// (a group is `per` blocks).
void fold_blocks(const int32_t* bs, int64_t count, int64_t nb, int64_t per, int64_t gt,
                 int32_t* out, int64_t ldo) {
  for (int64_t r = 0; r < count; ++r) {
    for (int64_t g = 0; g < gt; ++g) {
      const int64_t b1 = std::min(nb, (g + 1) * per);
      int32_t s = 0;
      for (int64_t b = g * per; b < b1; ++b) s += bs[r * nb + b];
      out[r * ldo + g] = s;
    }
  }
}

/// What both SIMD kernels derive from a call's shape: x reordered in chunks of `chunk` codes
/// (chunk / 2 packed bytes each), nb blocks of 32, gt groups. Groups of 32 store block sums
/// straight into out and tsum (direct); other groups collect them in bs [rows + 1, nb] (the
/// last row for tsum) and fold them per channel (finish_channel).
struct ChunkLayout {
  int64_t nb, nch, padded, bytes, gt;
  bool direct;
  int32_t* bs;
};

ChunkLayout chunk_layout(int64_t rows, int64_t len, int64_t group, int64_t chunk) {
  ChunkLayout l{};
  l.nb = ceil_div(len, kBlock);
  l.nch = ceil_div(len, chunk);
  l.padded = l.nch * chunk;
  l.bytes = len / 2;
  l.gt = ceil_div(len, group);
  l.direct = group == kBlock;
  l.bs = l.direct ? nullptr : scratch<int32_t, 1>(static_cast<size_t>((rows + 1) * l.nb));
  return l;
}

/// Where the block sums of row m (rows: tsum) of channel j, from block b0, go.
int32_t* block_dst(const ChunkLayout& l, int64_t m, int64_t rows, int64_t j, int64_t b0,
                   int32_t* out, int64_t ldo, int32_t* tsum) {
  if (!l.direct) return l.bs + m * l.nb + b0;
  return m == rows ? tsum + j * l.gt + b0 : out + m * ldo + j * l.gt + b0;
}

/// Channel j's block sums folded into its groups (a no-op for direct layouts).
void finish_channel(const ChunkLayout& l, int64_t rows, int64_t group, int64_t j, int32_t* out,
                    int64_t ldo, int32_t* tsum) {
  if (l.direct) return;
  const int64_t per = group / kBlock;
  fold_blocks(l.bs, rows, l.nb, per, l.gt, out + j * l.gt, ldo);
  if (tsum != nullptr) fold_blocks(l.bs + rows * l.nb, 1, l.nb, per, l.gt, tsum + j * l.gt, 0);
}

#ifdef QBC_I4_SIMD

// GCC 12's AVX-512 unpack intrinsics pass an _mm512_undefined operand that -Wmaybe-uninitialized
// reports from inside the system header.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define QBC_I4_VNNI __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512vnni")))
#define QBC_I4_AVX2 __attribute__((target("avx2")))

/// The 16 block sums of four chunk accumulators (a chunk is four 128-bit block lanes), in
/// block order: lanes of A and B, then of C and D, paired by unpacks, then one permute.
QBC_I4_VNNI inline __m512i reduce16(const __m512i* a) {
  const __m512i s1 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(a[0], a[1]), _mm512_unpackhi_epi32(a[0], a[1]));
  const __m512i s2 =
      _mm512_add_epi32(_mm512_unpacklo_epi32(a[2], a[3]), _mm512_unpackhi_epi32(a[2], a[3]));
  const __m512i t = _mm512_add_epi32(_mm512_unpacklo_epi64(s1, s2), _mm512_unpackhi_epi64(s1, s2));
  // t[4 L + c] is block L of chunk c; block 4 c + L goes to lane 4 c + L.
  const __m512i perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_epi32(perm, t);
}

/// The VNNI kernel over x reordered in chunks of 128 codes (64 packed bytes a chunk).
/// Block sums go to out directly for groups of 32, else to bs [rows + 1, nb] and are folded.
QBC_I4_VNNI void i4_vnni(const int8_t* xd, int64_t rows, const uint8_t* w, int64_t ldw, int64_t n,
                         int64_t len, int64_t group, int32_t* out, int64_t ldo, int32_t* tsum) {
  constexpr int64_t kChunk = 128;
  const ChunkLayout l = chunk_layout(rows, len, group, kChunk);
  const __m512i low = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi8(static_cast<char>(0x88));
  const __m512i ones = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* wr = w + j * ldw;
    for (int64_t c0 = 0; c0 < l.nch; c0 += 4) {
      const int64_t cn = std::min<int64_t>(4, l.nch - c0), b0 = c0 * 4;
      const int64_t bn = std::min<int64_t>(16, l.nb - b0);
      const __mmask16 store_mask = static_cast<__mmask16>((1u << bn) - 1);
      __m512i tl[4], th[4], acc[4];
      for (int c = 0; c < 4; ++c) {
        tl[c] = th[c] = acc[c] = zero;
        if (c >= cn) continue;
        const int64_t at = (c0 + c) * 64, left = l.bytes - at;
        __m512i v;
        if (left >= 64) {
          v = _mm512_xor_si512(_mm512_loadu_si512(wr + at), flip);
        } else {  // the short last chunk: padding bytes stay 0 (t = 0 adds nothing to Σ t)
          const __mmask64 m = (__mmask64{1} << left) - 1;
          v = _mm512_maskz_mov_epi8(m, _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, wr + at), flip));
        }
        tl[c] = _mm512_and_si512(v, low);
        th[c] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
        acc[c] = _mm512_dpbusd_epi32(zero, _mm512_add_epi8(tl[c], th[c]), ones);
      }
      if (tsum != nullptr) {
        int32_t* dst = block_dst(l, rows, rows, j, b0, out, ldo, tsum);
        _mm512_mask_storeu_epi32(dst, store_mask, reduce16(acc));
      }
      for (int64_t m = 0; m < rows; ++m) {
        const int8_t* xm = xd + m * l.padded + c0 * kChunk;
        for (int c = 0; c < 4; ++c) {
          if (c >= cn) {
            acc[c] = zero;
            continue;
          }
          const __m512i xe = _mm512_loadu_si512(xm + c * kChunk);
          const __m512i xo = _mm512_loadu_si512(xm + c * kChunk + 64);
          acc[c] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, tl[c], xe), th[c], xo);
        }
        _mm512_mask_storeu_epi32(block_dst(l, m, rows, j, b0, out, ldo, tsum), store_mask,
                                 reduce16(acc));
      }
    }
    finish_channel(l, rows, group, j, out, ldo, tsum);
  }
}

/// The 8 block sums of four chunk accumulators (a chunk is two 128-bit block lanes).
QBC_I4_AVX2 inline __m256i reduce8(const __m256i* a) {
  const __m256i s1 =
      _mm256_add_epi32(_mm256_unpacklo_epi32(a[0], a[1]), _mm256_unpackhi_epi32(a[0], a[1]));
  const __m256i s2 =
      _mm256_add_epi32(_mm256_unpacklo_epi32(a[2], a[3]), _mm256_unpackhi_epi32(a[2], a[3]));
  const __m256i t = _mm256_add_epi32(_mm256_unpacklo_epi64(s1, s2), _mm256_unpackhi_epi64(s1, s2));
  // t[4 L + c] is block L of chunk c; block 2 c + L goes to lane 2 c + L.
  return _mm256_permutevar8x32_epi32(t, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/// Stores the first `count` int32 lanes of v at p.
QBC_I4_AVX2 inline void store_lanes(int32_t* p, __m256i v, int64_t count) {
  if (count == 8) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
    return;
  }
  alignas(32) int32_t tmp[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), v);
  std::memcpy(p, tmp, static_cast<size_t>(count) * sizeof(int32_t));
}

/// The AVX2 kernel over x reordered in chunks of 64 codes (32 packed bytes a chunk): products
/// of unsigned t and signed x in int16 pairs (vpmaddubsw: |t x + t' x'| <= 3840, no
/// saturation; the even and odd halves add to at most 7680), widened by vpmaddwd.
QBC_I4_AVX2 void i4_avx2(const int8_t* xd, int64_t rows, const uint8_t* w, int64_t ldw, int64_t n,
                         int64_t len, int64_t group, int32_t* out, int64_t ldo, int32_t* tsum) {
  constexpr int64_t kChunk = 64;
  const ChunkLayout l = chunk_layout(rows, len, group, kChunk);
  const __m256i low = _mm256_set1_epi8(0x0F), flip = _mm256_set1_epi8(static_cast<char>(0x88));
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  const __m256i zero = _mm256_setzero_si256();
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* wr = w + j * ldw;
    for (int64_t c0 = 0; c0 < l.nch; c0 += 4) {
      const int64_t cn = std::min<int64_t>(4, l.nch - c0), b0 = c0 * 2;
      const int64_t bn = std::min<int64_t>(8, l.nb - b0);
      __m256i tl[4], th[4], acc[4];
      for (int c = 0; c < 4; ++c) {
        tl[c] = th[c] = acc[c] = zero;
        if (c >= cn) continue;
        const int64_t at = (c0 + c) * 32, left = l.bytes - at;
        __m256i v;
        if (left >= 32) {
          v = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + at)), flip);
        } else {  // the short last chunk: padding bytes stay 0
          alignas(32) uint8_t tail[32] = {};
          for (int64_t i = 0; i < left; ++i) tail[i] = wr[at + i] ^ 0x88;
          v = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
        }
        tl[c] = _mm256_and_si256(v, low);
        th[c] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
        acc[c] =
            _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_add_epi8(tl[c], th[c]), ones8), ones16);
      }
      if (tsum != nullptr)
        store_lanes(block_dst(l, rows, rows, j, b0, out, ldo, tsum), reduce8(acc), bn);
      for (int64_t m = 0; m < rows; ++m) {
        const int8_t* xm = xd + m * l.padded + c0 * kChunk;
        for (int c = 0; c < 4; ++c) {
          if (c >= cn) {
            acc[c] = zero;
            continue;
          }
          const __m256i xe = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xm + c * kChunk));
          const __m256i xo =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xm + c * kChunk + 32));
          const __m256i p =
              _mm256_add_epi16(_mm256_maddubs_epi16(tl[c], xe), _mm256_maddubs_epi16(th[c], xo));
          acc[c] = _mm256_madd_epi16(p, ones16);
        }
        store_lanes(block_dst(l, m, rows, j, b0, out, ldo, tsum), reduce8(acc), bn);
      }
    }
    finish_channel(l, rows, group, j, out, ldo, tsum);
  }
}

// __builtin_cpu_supports takes string literals only.
#define QBC_I4_HAS(feature) (__builtin_cpu_init(), __builtin_cpu_supports(feature) != 0)

#endif

bool vnni_available() {
#ifdef QBC_I4_SIMD
  static const bool on = QBC_I4_HAS("avx512f") && QBC_I4_HAS("avx512bw") &&
                         QBC_I4_HAS("avx512vl") && QBC_I4_HAS("avx512vnni") &&
                         std::getenv("QBC_EXEC_NO_VNNI") == nullptr;
  return on;
#else
  return false;
#endif
}

bool avx2_available() {
#ifdef QBC_I4_SIMD
  static const bool on = QBC_I4_HAS("avx2") && std::getenv("QBC_EXEC_NO_AVX2") == nullptr;
  return on;
#else
  return false;
#endif
}

}  // namespace

bool i4_kernel_available(I4Kernel k) {
  switch (k) {
    case I4Kernel::kVnni:
      return vnni_available();
    case I4Kernel::kAvx2:
      return avx2_available();
    case I4Kernel::kPortable:
      return true;
  }
  return false;
}

I4Kernel i4_kernel_for(int64_t group) {
  if (group % kBlock != 0) return I4Kernel::kPortable;
  if (vnni_available()) return I4Kernel::kVnni;
  if (avx2_available()) return I4Kernel::kAvx2;
  return I4Kernel::kPortable;
}

void dot_i4_groups_with(I4Kernel k, const int8_t* x, int64_t ldx, int64_t rows, const uint8_t* w,
                        int64_t ldw, int64_t n, int64_t len, int64_t group, int32_t* out,
                        int64_t ldo, int32_t* tsum) {
  if (rows <= 0 || n <= 0 || len <= 0) return;
#ifdef QBC_I4_SIMD
  if (k == I4Kernel::kVnni) {
    return i4_vnni(reorder_x(x, ldx, rows, len, 128), rows, w, ldw, n, len, group, out, ldo, tsum);
  }
  if (k == I4Kernel::kAvx2) {
    return i4_avx2(reorder_x(x, ldx, rows, len, 64), rows, w, ldw, n, len, group, out, ldo, tsum);
  }
#endif
  i4_portable(x, ldx, rows, w, ldw, n, len, group, out, ldo, tsum);
}

void dot_i4_groups(const int8_t* x, int64_t ldx, int64_t rows, const uint8_t* w, int64_t ldw,
                   int64_t n, int64_t len, int64_t group, int32_t* out, int64_t ldo,
                   int32_t* tsum) {
  dot_i4_groups_with(i4_kernel_for(group), x, ldx, rows, w, ldw, n, len, group, out, ldo, tsum);
}

}  // namespace qbc::runtime
