// The grouped stream kernels (see group_stream.h). A step covers 16 groups of the stream (512
// int8 weight bytes, or 256 packed int4 bytes), so its 16 sums fill one 512-bit register in
// stream order and the corrections, the accumulate and the store run on it directly.
//
// int8 weights: Σ (x − xz) w = Σ u w − c Σ w with u = x + 128 and c = xz + 128 in [0, 255], both
// vpdpbusd against the same weight register (u8 × s8, four products a 32-bit lane), subtracted
// before the reduction. int4 weights: each nibble n of a packed byte gives t = w + 8 = n ^ 8 in
// [0, 15] (one ternary-logic op a nibble); Σ (x − xz) t = Σ t_lo x_even + Σ t_hi x_odd − xz Σ t,
// vpdpbusd with t unsigned and the codes signed (one row: the xz Σ t term in the lanes; several
// rows: Σ t reduced once a step for all of them), and (w − wz) = t − (8 + wz).
// Every product and sum is an exact integer; the 32-bit lanes wrap modulo 2^32 as the
// contract's result does, so the order of the adds does not matter.
#include "group_stream.h"

#include <cstdlib>
#include <cstring>

#include "matmul_kernel.h"
#include "values.h"
#include "vec_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QBC_STREAM_SIMD 1
#endif

namespace qbc::runtime {

#ifdef QBC_STREAM_SIMD
namespace {

/// prepare_i4's even/odd split and the group sums, a group (32 codes) a step with AVX2: each
/// 128-bit lane's bytes shuffled to its 8 even then 8 odd codes, the two lanes' halves joined
/// by a 64-bit permute; Σ x = Σ (x + 128) − 128 · 32 from vpsadbw.
__attribute__((target("avx2"))) void split_groups_avx2(const int8_t* x, int64_t gt, int8_t* even,
                                                       int8_t* odd, uint32_t* sums) {
  const __m256i order = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2,
                                         4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t g = 0; g < gt; ++g) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * g));
    const __m256i s = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, order), 0xD8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(even + 16 * g), _mm256_castsi256_si128(s));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(odd + 16 * g), _mm256_extracti128_si256(s, 1));
    const __m256i sad = _mm256_sad_epu8(_mm256_xor_si256(v, flip), _mm256_setzero_si256());
    const __m128i h = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
    const uint64_t su = static_cast<uint64_t>(_mm_cvtsi128_si64(h)) +
                        static_cast<uint64_t>(_mm_extract_epi64(h, 1));
    sums[g] = static_cast<uint32_t>(su) - 128u * 32u;
  }
}

}  // namespace
#endif

bool StreamRow::same(const int8_t* x, int64_t kt, int32_t xz, Layout layout) {
  if (layout == layout_ && kt == kt_ && xz == xz_ &&
      std::memcmp(x, x_.data(), static_cast<size_t>(kt)) == 0) {
    return true;
  }
  layout_ = layout;
  kt_ = kt;
  xz_ = xz;
  x_.assign(x, x + kt);
  xs_.resize(static_cast<size_t>(kt / kStreamGroup + 16));
  return false;
}

/// xs_[g] = Σ_{k in group g} x_k − 32 · xz for g < gt (with x null, xs_[g] already holds
/// Σ x_k), then the repeat past gt.
void StreamRow::prepare_sums(const int8_t* x) {
  const int64_t gt = kt_ / kStreamGroup;
  for (int64_t g = 0; g < gt; ++g) {
    if (x != nullptr) {
      int32_t s = 0;
      for (int64_t k = g * kStreamGroup; k < (g + 1) * kStreamGroup; ++k) s += x[k];
      xs_[static_cast<size_t>(g)] = static_cast<uint32_t>(s);
    }
    xs_[static_cast<size_t>(g)] -= static_cast<uint32_t>(xz_) * uint32_t{kStreamGroup};
  }
  for (int64_t i = gt; i < gt + 16; ++i)
    xs_[static_cast<size_t>(i)] = xs_[static_cast<size_t>(i % gt)];
}

void StreamRow::prepare_i8(const int8_t* x, int64_t kt, int32_t xz) {
  if (same(x, kt, xz, Layout::kI8)) return;
  prepare_sums(x);
  u_.resize(static_cast<size_t>(kt + 32));
  for (int64_t k = 0; k < kt; ++k)
    u_[static_cast<size_t>(k)] = static_cast<uint8_t>(static_cast<uint8_t>(x[k]) ^ 0x80u);
  for (int64_t k = kt; k < kt + 32; ++k)
    u_[static_cast<size_t>(k)] = u_[static_cast<size_t>(k % kt)];
}

void StreamRow::prepare_i4(const int8_t* x, int64_t kt, int32_t xz) {
  if (same(x, kt, xz, Layout::kI4)) return;
  const int64_t half = kt / 2;  // 16 bytes a group
  even_.resize(static_cast<size_t>(half + 48));
  odd_.resize(static_cast<size_t>(half + 48));
  bool summed = false;
#ifdef QBC_STREAM_SIMD
  if (cpu_has_avx2()) {  // QBC_EXEC_NO_AVX2 selects the loops below, as elsewhere
    split_groups_avx2(x, kt / kStreamGroup, even_.data(), odd_.data(), xs_.data());
    summed = true;
  }
#endif
  if (!summed) {
    for (int64_t i = 0; i < half; ++i) {
      even_[static_cast<size_t>(i)] = x[2 * i];
      odd_[static_cast<size_t>(i)] = x[2 * i + 1];
    }
  }
  prepare_sums(summed ? nullptr : x);
  for (int64_t i = half; i < half + 48; ++i) {
    even_[static_cast<size_t>(i)] = even_[static_cast<size_t>(i % half)];
    odd_[static_cast<size_t>(i)] = odd_[static_cast<size_t>(i % half)];
  }
}

int32_t StreamZeros::at(int64_t q) const {
  const int64_t i = first + q;
  int32_t v[2] = {0, 0};
  switch (kind) {
    case Kind::kNone:
      return 0;
    case Kind::kI32:
      load(p + 4 * i, 1, v);
      return v[0];
    case Kind::kI8:
      load_codes(p + i, isa::DType::kI8, 1, v);
      return v[0];
    case Kind::kI4:  // the byte holding code i, both its codes
      load_codes(p + i / 2, isa::DType::kI4, 2, v);
      return v[i % 2];
  }
  return 0;
}

namespace {

/// out[q] (+)= dot − off · xs[g], modulo 2^32 (the shared epilogue of the portable loops).
void finish(uint8_t* out, int64_t q, uint32_t dot, uint32_t off, uint32_t xs, bool accumulate) {
  uint32_t v = dot - off * xs;
  if (accumulate) {
    uint32_t old = 0;
    load(out + 4 * q, 1, &old);
    v += old;
  }
  store(&v, 1, out + 4 * q);
}

}  // namespace

void group_stream_i8_portable(const StreamRow& x, const int8_t* w, int64_t n, const StreamZeros& wz,
                              bool accumulate, uint8_t* out) {
  const int64_t gt = x.gt();
  const uint32_t c = static_cast<uint32_t>(x.xz() + 128);
  for (int64_t q = 0; q < n * gt; ++q) {
    const int64_t g = q % gt;
    const int8_t* wg = w + q * kStreamGroup;
    uint32_t dot = 0;
    for (int64_t k = 0; k < kStreamGroup; ++k)
      dot += (uint32_t{x.u()[g * kStreamGroup + k]} - c) * static_cast<uint32_t>(int32_t{wg[k]});
    finish(out, q, dot, static_cast<uint32_t>(wz.at(q)), x.xs()[g], accumulate);
  }
}

void group_stream_i4_portable(const StreamRow& x, const uint8_t* w, int64_t n,
                              const StreamZeros& wz, bool accumulate, uint8_t* out) {
  const int64_t gt = x.gt();
  const uint32_t xz = static_cast<uint32_t>(x.xz());
  for (int64_t q = 0; q < n * gt; ++q) {
    const int64_t g = q % gt;
    const uint8_t* wg = w + q * (kStreamGroup / 2);
    uint32_t dot = 0;  // Σ (x − xz) t, t = w + 8
    for (int64_t i = 0; i < kStreamGroup / 2; ++i) {
      const uint32_t lo = (wg[i] & 0xFu) ^ 8u, hi = (wg[i] >> 4) ^ 8u;
      dot += lo * (static_cast<uint32_t>(int32_t{x.even()[g * 16 + i]}) - xz);
      dot += hi * (static_cast<uint32_t>(int32_t{x.odd()[g * 16 + i]}) - xz);
    }
    const uint32_t off = 8u + static_cast<uint32_t>(wz.at(q));
    finish(out, q, dot, off, x.xs()[g], accumulate);
  }
}

#ifdef QBC_STREAM_SIMD

#define QBC_STREAM_VNNI __attribute__((target("avx2,avx512f,avx512bw,avx512vl,avx512vnni")))
// GCC 12's AVX-512 unpack intrinsics pass an _mm512_undefined operand that -Wmaybe-uninitialized
// reports from inside the system header.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace {

/// Weight bytes a decode step prefetches ahead of what it reads (the per-channel kernel's).
constexpr int64_t kAhead = 2048;

/// The bytes [0, n) of a 64-byte load (n clamped to [0, 64]); the rest read as zero and are
/// never stored.
QBC_STREAM_VNNI inline __m512i load_part(const void* p, int64_t n) {
  if (n >= 64) return _mm512_loadu_si512(p);
  const __mmask64 m = n <= 0 ? __mmask64{0} : (__mmask64{1} << n) - 1;
  return _mm512_maskz_loadu_epi8(m, p);
}

/// Pairs of lanes summed: per 128-bit lane L, [a0 + a2, b0 + b2, a1 + a3, b1 + b3].
QBC_STREAM_VNNI inline __m512i pair32(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}
QBC_STREAM_VNNI inline __m512i pair64(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

/// Four registers' 128-bit lane sums: t[4 L + r] = Σ of lane L of d[r].
QBC_STREAM_VNNI inline __m512i lane_sums(const __m512i* d) {
  return pair64(pair32(d[0], d[1]), pair32(d[2], d[3]));
}

/// The zero points q .. q + 16 of a step as int32 lanes (the first `m` lanes; the rest 0),
/// plus `bias` (8 for int4 weights: w − wz = t − (8 + wz)). Packed int4 codes: `first + q`
/// is even, so the step's 16 codes are 8 whole bytes; (v ^ 8) − 8 sign-extends a nibble v.
QBC_STREAM_VNNI inline __m512i zero_points(const StreamZeros& wz, int64_t q, __mmask16 m,
                                           int64_t count, int32_t bias) {
  const int64_t i = wz.first + q;
  switch (wz.kind) {
    case StreamZeros::Kind::kNone:
      return _mm512_set1_epi32(bias);
    case StreamZeros::Kind::kI32:
      return _mm512_add_epi32(_mm512_maskz_loadu_epi32(m, wz.p + 4 * i), _mm512_set1_epi32(bias));
    case StreamZeros::Kind::kI8:
      return _mm512_add_epi32(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, wz.p + i)),
                              _mm512_set1_epi32(bias));
    case StreamZeros::Kind::kI4: {
      const __mmask16 bytes = static_cast<__mmask16>((1u << ((count + 1) / 2)) - 1);
      const __m128i b = _mm_maskz_loadu_epi8(bytes, wz.p + i / 2);
      const __m128i low = _mm_set1_epi8(0x0F);
      const __m128i nib =
          _mm_unpacklo_epi8(_mm_and_si128(b, low), _mm_and_si128(_mm_srli_epi16(b, 4), low));
      const __m128i eight = _mm_set1_epi8(8);
      const __m128i code = _mm_sub_epi8(_mm_xor_si128(nib, eight), eight);
      return _mm512_add_epi32(_mm512_cvtepi8_epi32(code), _mm512_set1_epi32(bias));
    }
  }
  return _mm512_set1_epi32(bias);
}

/// One row's corrections, accumulate and store of a step's sums (lanes in `m`):
/// o = (o +) v − off · xs, off = bias + wz.
QBC_STREAM_VNNI inline void store_row(__m512i v, __m512i off, const uint32_t* xs, bool accumulate,
                                      __mmask16 m, uint8_t* out) {
  v = _mm512_sub_epi32(v, _mm512_mullo_epi32(off, _mm512_loadu_si512(xs)));
  int32_t* o = reinterpret_cast<int32_t*>(out);  // unaligned lanes
  if (accumulate) v = _mm512_add_epi32(v, _mm512_maskz_loadu_epi32(m, o));
  _mm512_mask_storeu_epi32(o, m, v);
}

/// store_row for one row's step at stream group q (the first `count` of its 16 sums).
QBC_STREAM_VNNI inline void store_step(__m512i v, const StreamZeros& wz, int64_t q,
                                       const uint32_t* xs, int32_t bias, bool accumulate,
                                       int64_t count, uint8_t* out) {
  count = count < 16 ? count : 16;
  const __mmask16 m = static_cast<__mmask16>((1u << count) - 1);
  store_row(v, zero_points(wz, q, m, count, bias), xs, accumulate, m, out + 4 * q);
}

/// (q + step) % gt from q % gt without a division when gt >= step.
inline int64_t advance(int64_t r, int64_t step, int64_t gt) {
  r += step;
  if (gt >= step) return r >= gt ? r - gt : r;
  return r % gt;
}

QBC_STREAM_VNNI void stream_i8_vnni(const StreamRow& x, const int8_t* w, int64_t n,
                                    const StreamZeros& wz, bool accumulate, uint8_t* out) {
  const int64_t kt = x.kt(), gt = x.gt(), total = n * gt;
  const __m512i c = _mm512_set1_epi8(static_cast<char>(static_cast<uint8_t>(x.xz() + 128)));
  const __m512i zero = _mm512_setzero_si512();
  // Output p of a step is group 2 i + h of register i = 4 m + r: the sums of its 128-bit lanes
  // 2 h and 2 h + 1 in lane_sums(registers 4 m ..) (lanes 4 (2 h) + r and 4 (2 h + 1) + r).
  const __m512i lo = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 16, 24, 17, 25, 18, 26, 19, 27);
  const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(4));
  int64_t g = 0;   // q % gt
  int64_t uo = 0;  // (q % gt) * 32 for each register in turn
  for (int64_t q = 0; q < total; q += 16) {
    const int64_t left = (total - q) * kStreamGroup;  // weight bytes from this step's start
    const int8_t* wq = w + q * kStreamGroup;
    __m512i d[8];
    for (int i = 0; i < 8; ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(wq + 64 * i + kAhead), _MM_HINT_T0);
      const __m512i wv = load_part(wq + 64 * i, left - 64 * i);
      const __m512i uv = _mm512_loadu_si512(x.u() + uo);
      d[i] = _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, uv, wv), _mm512_dpbusd_epi32(zero, c, wv));
      uo += 64;  // two groups on; kt >= 32, so at most two wraps
      if (uo >= kt) uo -= kt;
      if (uo >= kt) uo -= kt;
    }
    const __m512i t0 = lane_sums(d), t1 = lane_sums(d + 4);
    const __m512i v = _mm512_add_epi32(_mm512_permutex2var_epi32(t0, lo, t1),
                                       _mm512_permutex2var_epi32(t0, hi, t1));
    store_step(v, wz, q, x.xs() + g, 0, accumulate, total - q, out);
    g = advance(g, 16, gt);
  }
}

/// R rows (1 to 4) against the same packed int4 stream: each weight register is split into
/// its t nibbles once (t = (nibble & 15) ^ 8 in one ternary-logic op each) and serves every row;
/// Σ (x − xz) t = Σ t_lo x_even + Σ t_hi x_odd − xz Σ t, with Σ t per group reduced once per
/// step for all rows (one row: xz Σ t subtracted in the lanes, the cheaper order for decode).
/// Row r's sums go to out + r * ldo bytes.
template <int R>
QBC_STREAM_VNNI void stream_i4_vnni(const StreamRow* x, const uint8_t* w, int64_t n,
                                    const StreamZeros& wz, bool accumulate, uint8_t* out,
                                    int64_t ldo) {
  const int64_t gt = x[0].gt(), total = n * gt, half = x[0].kt() / 2;
  const __m512i low = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
  const __m512i ones = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
  constexpr int kAndXor = 0x6A;  // (a & b) ^ c
  // lane_sums(d)[4 L + r] is group L of register r; group 4 r + L goes to lane 4 r + L.
  const __m512i perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  __m512i xz[R];
  for (int r = 0; r < R; ++r) xz[r] = _mm512_set1_epi32(x[r].xz());
  const __m512i xzb = _mm512_set1_epi8(static_cast<char>(x[0].xz()));  // one row: within int8
  int64_t g = 0;                                                       // q % gt
  int64_t eo = 0;  // (q % gt) * 16 for each register in turn
  for (int64_t q = 0; q < total; q += 16) {
    const int64_t left = (total - q) * (kStreamGroup / 2);
    const uint8_t* wq = w + q * (kStreamGroup / 2);
    __m512i d[R][4], ts[4];
    for (int i = 0; i < 4; ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(wq + 64 * i + kAhead), _MM_HINT_T0);
      const __m512i v = load_part(wq + 64 * i, left - 64 * i);
      const __m512i tl = _mm512_ternarylogic_epi32(v, low, eight, kAndXor);
      const __m512i th = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), low, eight, kAndXor);
      const __m512i tt = _mm512_add_epi8(tl, th);
      if constexpr (R > 1) ts[i] = _mm512_dpbusd_epi32(zero, tt, ones);
      for (int r = 0; r < R; ++r) {
        const __m512i xe = _mm512_loadu_si512(x[r].even() + eo);
        const __m512i xo = _mm512_loadu_si512(x[r].odd() + eo);
        d[r][i] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, tl, xe), th, xo);
        // One row (decode): its xz Σ t before the reduction, not a second reduction of Σ t.
        if constexpr (R == 1)
          d[r][i] = _mm512_sub_epi32(d[r][i], _mm512_dpbusd_epi32(zero, tt, xzb));
      }
      eo += 64;  // four groups on
      while (eo >= half) eo -= half;
    }
    const int64_t count = total - q < 16 ? total - q : 16;
    const __mmask16 m = static_cast<__mmask16>((1u << count) - 1);
    const __m512i off = zero_points(wz, q, m, count, 8);
    __m512i tsum = zero;
    if constexpr (R > 1) tsum = _mm512_permutexvar_epi32(perm, lane_sums(ts));
    for (int r = 0; r < R; ++r) {
      __m512i v = _mm512_permutexvar_epi32(perm, lane_sums(d[r]));
      if constexpr (R > 1) v = _mm512_sub_epi32(v, _mm512_mullo_epi32(xz[r], tsum));
      store_row(v, off, x[r].xs() + g, accumulate, m, out + r * ldo + 4 * q);
    }
    g = advance(g, 16, gt);
  }
}

/// The VNNI host check of dot_u8 (QBC_EXEC_NO_VNNI turns it off), and QBC_EXEC_NO_STREAM.
bool stream_vnni() {
  static const bool on = dot_u8_fast() && std::getenv("QBC_EXEC_NO_STREAM") == nullptr;
  return on;
}

}  // namespace

#endif

bool group_stream_fast() {
#ifdef QBC_STREAM_SIMD
  return stream_vnni();
#else
  return false;
#endif
}

namespace {

/// Packed int4 zero points from an odd index have no whole bytes: the portable loops take them.
bool simd_zeros(const StreamZeros& wz) {
  return wz.kind != StreamZeros::Kind::kI4 || wz.first % 2 == 0;
}

}  // namespace

void group_stream_i8(const StreamRow& x, const int8_t* w, int64_t n, const StreamZeros& wz,
                     bool accumulate, uint8_t* out) {
#ifdef QBC_STREAM_SIMD
  if (stream_vnni() && simd_zeros(wz)) return stream_i8_vnni(x, w, n, wz, accumulate, out);
#endif
  group_stream_i8_portable(x, w, n, wz, accumulate, out);
}

void group_stream_i4(const StreamRow& x, const uint8_t* w, int64_t n, const StreamZeros& wz,
                     bool accumulate, uint8_t* out) {
  group_stream_i4_rows(&x, 1, w, n, wz, accumulate, out, 0);
}

void group_stream_i4_rows(const StreamRow* x, int64_t rows, const uint8_t* w, int64_t n,
                          const StreamZeros& wz, bool accumulate, uint8_t* out, int64_t ldo) {
  for (int64_t r0 = 0; r0 < rows; r0 += 4) {
    const StreamRow* xr = x + r0;
    uint8_t* o = out + r0 * ldo;
#ifdef QBC_STREAM_SIMD
    if (stream_vnni() && simd_zeros(wz)) {
      switch (rows - r0 < 4 ? rows - r0 : 4) {
        case 1:
          stream_i4_vnni<1>(xr, w, n, wz, accumulate, o, ldo);
          continue;
        case 2:
          stream_i4_vnni<2>(xr, w, n, wz, accumulate, o, ldo);
          continue;
        case 3:
          stream_i4_vnni<3>(xr, w, n, wz, accumulate, o, ldo);
          continue;
        default:
          stream_i4_vnni<4>(xr, w, n, wz, accumulate, o, ldo);
          continue;
      }
    }
#endif
    for (int64_t r = 0; r < rows - r0 && r < 4; ++r)
      group_stream_i4_portable(xr[r], w, n, wz, accumulate, o + r * ldo);
  }
}

}  // namespace qbc::runtime
