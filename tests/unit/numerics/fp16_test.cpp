// round_fp16 (docs/numerics.md "Principles"): agrees with tensorfile's fp16 converter on
// random fp32 values and rounds once, directly from fp64. fp16_bits / fp16_from_bits: the bit
// patterns of those values, exact both ways.
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

}  // namespace
}  // namespace qbc::numerics
