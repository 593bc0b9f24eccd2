// round_fp16 (docs/numerics.md "Principles"): agrees with tensorfile's fp16 converter on
// random fp32 values and rounds once, directly from fp64.
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

}  // namespace
}  // namespace qbc::numerics
