// fp16 rounding, the value format between ops: docs/numerics.md "Principles" 2 and 3 (one
// IEEE round-to-nearest-even rounding to fp16 at each op's output) and "Where values live,
// and why" (fp16 values on the vector unit, fp32 where the head leaves them unrounded).
#pragma once

#include <cstdint>
#include <cstring>

namespace qbc::numerics {

/// Rounds `x` once, to nearest even, to the closest IEEE binary16 value (returned as
/// float; overflow gives ±infinity, NaN stays NaN). Rounds directly from fp64, so it
/// avoids the double rounding of fp64 -> fp32 -> fp16.
float round_fp16(double x);

/// fp16(v) when `fp16`, else v unchanged.
float maybe_fp16(float v, bool fp16);

/// The IEEE binary16 bit pattern of `x` rounded once, to nearest even (the value
/// round_fp16(x) has, with its sign of zero; NaN gives a quiet NaN of the same sign).
/// Exact for every value that already is an fp16 value. Inline: the executor converts every
/// value it stores.
inline uint16_t fp16_bits(float x) {
  uint32_t f;
  std::memcpy(&f, &x, sizeof f);
  const uint16_t sign = static_cast<uint16_t>((f >> 16) & 0x8000u);
  const uint32_t a = f & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u | static_cast<uint16_t>((a >> 13) & 0x3FFu);  // NaN
  if (a >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520 (and infinity): infinity
  if (a < 0x38800000u) {                        // below 2^-14: subnormal or zero
    if (a <= 0x33000000u) return sign;          // at most 2^-25 (a tie, to even): zero
    const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
    const int shift = 126 - static_cast<int>(a >> 23);  // 14..24
    uint32_t h = m >> shift;
    const uint32_t rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1u))) ++h;  // 1024 is the smallest normal
    return sign | static_cast<uint16_t>(h);
  }
  uint32_t h = (a >> 13) - (112u << 10);  // rebias the exponent 127 -> 15
  const uint32_t rest = a & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry moves the exponent
  return sign | static_cast<uint16_t>(h);
}

/// The value of the IEEE binary16 bit pattern `bits` (exact; NaN payloads are kept).
inline float fp16_from_bits(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t e = (bits >> 10) & 0x1Fu, m = bits & 0x3FFu;
  uint32_t f = 0;
  if (e == 0x1Fu) {
    f = sign | 0x7F800000u | (m << 13);
  } else if (e != 0) {
    f = sign | ((e + 112u) << 23) | (m << 13);
  } else if (m == 0) {
    f = sign;
  } else {  // subnormal m * 2^-24: normalise the mantissa into a float exponent
    int shift = 0;
    uint32_t mm = m;
    while ((mm & 0x400u) == 0) {
      mm <<= 1;
      ++shift;
    }
    f = sign | ((113u - static_cast<uint32_t>(shift)) << 23) | ((mm & 0x3FFu) << 13);
  }
  float x;
  std::memcpy(&x, &f, sizeof x);
  return x;
}

/// fp16_bits(round_fp16(x)): the bit pattern of x rounded once from fp64 to nearest even.
/// Inputs whose result is a normal fp16 value or overflows from the top binade are rounded
/// on the fp64 bits directly (the executor's fast path); the others (zero, subnormal results,
/// larger values, infinity, NaN) go through round_fp16 itself.
inline uint16_t round_fp16_bits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  const int e = static_cast<int>((u >> 52) & 0x7FFu) - 1023;  // x = ±1.m * 2^e
  if (e >= -14 && e <= 15) {
    const uint16_t sign = static_cast<uint16_t>((u >> 48) & 0x8000u);
    const uint64_t m = u & ((uint64_t{1} << 52) - 1);
    uint32_t h = (static_cast<uint32_t>(e + 15) << 10) | static_cast<uint32_t>(m >> 42);
    const uint64_t rest = m & ((uint64_t{1} << 42) - 1), half = uint64_t{1} << 41;
    if (rest > half || (rest == half && (h & 1u))) ++h;  // a carry moves the exponent (65520: inf)
    return sign | static_cast<uint16_t>(h);
  }
  return fp16_bits(round_fp16(x));
}

}  // namespace qbc::numerics
