// round_fp16 (docs/numerics.md "Principles"): agrees with tensorfile's fp16 converter on
// random fp32 values and rounds once, directly from fp64. fp16_bits / fp16_from_bits: the bit
// patterns of those values, exact both ways. round_fp16_bits: round_fp16's bits for any fp64
// value (random, ties and their neighbours, every binade, the special values).
#include "qbc/numerics/fp16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "qbc/tensorfile/dtype.h"

namespace qbc::numerics {
namespace {

/// fp16 rounding through tensorfile's converter (independent of round_fp16).
float h(float x) { return tensorfile::fp16_to_f32(tensorfile::f32_to_fp16(x)); }

TEST(NumericsFp16, RoundFp16MatchesConverterAndRoundsOnceFromFp64) {
  uint32_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 1664525u + 1013904223u;
    float f;
    std::memcpy(&f, &state, sizeof f);
    if (std::isnan(f)) continue;
    ASSERT_EQ(round_fp16(f), h(f)) << f;
  }
  // 1 + 2^-11 + 2^-40 lies just above a tie: direct rounding goes up, fp32 first would tie down.
  const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(round_fp16(x), 1.0f + std::ldexp(1.0f, -10));
  EXPECT_EQ(h(static_cast<float>(x)), 1.0f);
  EXPECT_TRUE(std::isinf(round_fp16(65520.0)));
  EXPECT_EQ(round_fp16(65519.0), 65504.0f);
}

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

TEST(NumericsFp16, BitsRoundTripEveryPattern) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h16 = static_cast<uint16_t>(b);
    const float f = fp16_from_bits(h16);
    ASSERT_EQ(f32_bits(f), f32_bits(tensorfile::fp16_to_f32(h16))) << b;
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(fp16_from_bits(fp16_bits(f)))) << b;
      continue;
    }
    ASSERT_EQ(fp16_bits(f), h16) << b;
  }
}

TEST(NumericsFp16, BitsOfAnyFloatAreItsRoundFp16) {
  uint32_t state = 777;
  for (int i = 0; i < 400000; ++i) {
    state = state * 1664525u + 1013904223u;
    // Half the draws in and around the fp16 range (exponents 100..145), half anywhere.
    uint32_t u = state;
    if (i % 2 == 0) u = (u & 0x807FFFFFu) | ((100u + (u >> 24) % 46u) << 23);
    float f;
    std::memcpy(&f, &u, sizeof f);
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_bits(fp16_from_bits(fp16_bits(f))), f32_bits(round_fp16(f))) << f;
    ASSERT_EQ(fp16_bits(f), tensorfile::f32_to_fp16(f)) << f;
  }
  // Ties to even, the subnormal boundary, the overflow threshold and signed zeros.
  EXPECT_EQ(fp16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3C00u);
  EXPECT_EQ(fp16_bits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02u);
  EXPECT_EQ(fp16_bits(std::ldexp(1.0f, -25)), 0x0000u);
  EXPECT_EQ(fp16_bits(std::ldexp(1.5f, -25)), 0x0001u);
  EXPECT_EQ(fp16_bits(std::ldexp(1023.5f, -24)), 0x0400u);
  EXPECT_EQ(fp16_bits(65519.0f), 0x7BFFu);
  EXPECT_EQ(fp16_bits(65520.0f), 0x7C00u);
  EXPECT_EQ(fp16_bits(-0.0f), 0x8000u);
  EXPECT_EQ(fp16_bits(-std::ldexp(1.0f, -30)), 0x8000u);
  EXPECT_TRUE(std::isnan(fp16_from_bits(fp16_bits(std::nanf("")))));
}

TEST(NumericsFp16, RoundFp16BitsEqualsBitsOfRoundFp16) {
  auto check = [](double x) {
    const float r = round_fp16(x);
    if (std::isnan(r)) {
      ASSERT_TRUE(std::isnan(fp16_from_bits(round_fp16_bits(x)))) << x;
    } else {
      ASSERT_EQ(round_fp16_bits(x), fp16_bits(r)) << x;
    }
  };
  uint64_t state = 99;
  for (int i = 0; i < 2000000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t u = state;
    // Most draws with exponents around the fp16 range (2^-30 .. 2^20), some anywhere.
    if (i % 8 != 0) u = (u & 0x800FFFFFFFFFFFFFull) | ((993ull + (u >> 52) % 51ull) << 52);
    // Every fourth: a value at or next to an fp16 rounding tie (the bits below the kept ten).
    if (i % 4 == 1) u = (u & ~((uint64_t{1} << 42) - 1)) | (uint64_t{1} << 41);
    if (i % 4 == 2) u = (u & ~((uint64_t{1} << 42) - 1)) | ((uint64_t{1} << 41) + 1);
    if (i % 4 == 3) u = (u & ~((uint64_t{1} << 42) - 1)) | ((uint64_t{1} << 41) - 1);
    double x;
    std::memcpy(&x, &u, sizeof x);
    check(x);
  }
  // Every fp16 value, the midpoints between neighbours (ties) and one fp64 ulp either side.
  for (uint32_t b = 0; b < 0x7C00; ++b) {
    for (double sign : {1.0, -1.0}) {
      const double v = sign * fp16_from_bits(static_cast<uint16_t>(b));
      const double next = sign * fp16_from_bits(static_cast<uint16_t>(b + 1));
      const double mid = (v + next) / 2;  // exact in fp64
      for (double x : {v, mid, std::nextafter(mid, 0.0), std::nextafter(mid, 2 * next)}) check(x);
    }
  }
  for (double x :
       {0.0, -0.0, 65504.0, 65519.999, 65520.0, 65536.0, 1e300, -1e300, std::ldexp(1.0, -14),
        std::ldexp(1.0, -15), std::ldexp(1.0, -25), 1e-300, HUGE_VAL, -HUGE_VAL, std::nan("")})
    check(x);
}

}  // namespace
}  // namespace qbc::numerics
