// The symmetric quantizer and the probability scale (docs/numerics.md "Quantizers"):
// round half to even in fp64 from the fp32 scale, clamped to the code range.
#include "qbc/numerics/quantizer.h"

#include <gtest/gtest.h>

namespace qbc::numerics {
namespace {

TEST(NumericsQuantizer, QuantizerRoundsHalfToEvenAndClamps) {
  // fp64 division by the fp32 scale: 1 / fp32(0.1) = 9.99999985 -> 10, 0.05 / fp32(0.1) < 0.5.
  const struct {
    double x;
    float scale;
    int bits, want;
  } cases[] = {{2.5, 1, 8, 2},        {3.5, 1, 8, 4},     {-2.5, 1, 8, -2},  {-3.5, 1, 8, -4},
               {200, 1, 8, 127},      {-200, 1, 8, -128}, {7.5, 1, 4, 7},    {-9, 1, 4, -8},
               {40000, 1, 16, 32767}, {1.0, 0.1f, 8, 10}, {0.05, 0.1f, 8, 0}};
  for (const auto& c : cases) EXPECT_EQ(quantize_symmetric(c.x, c.scale, c.bits), c.want) << c.x;
}

}  // namespace
}  // namespace qbc::numerics
