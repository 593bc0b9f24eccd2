// The symmetric quantizer and the probability scale (docs/numerics.md "Quantizers"):
// round half to even in fp64 from the fp32 scale, clamped to the code range; the row
// quantizers equal the scalar rules.
#include "qbc/numerics/quantizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

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

// The row quantizers (four at a time with AVX) give the scalar rules' codes for every input:
// ties, the clamps, NaN and infinities, signed zeros, subnormals, any row length.
TEST(NumericsQuantizer, RowQuantizersEqualTheScalarRules) {
  std::mt19937 g(99);
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::denorm_min(),
                            -1e-40f,
                            65504.0f,
                            -3.0e38f,
                            2.5f,
                            -2.5f,
                            0.5f};
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t n = trial % 14 + (trial % 5 == 0 ? 300 : 0);
    const int bits = trial % 3 == 0 ? 4 : trial % 3 == 1 ? 8 : 16;
    const float scale = trial % 7 == 0    ? 1.0f
                        : trial % 11 == 0 ? 1e-8f
                                          : std::ldexp(1.0f + static_cast<float>(g() % 1000) / 1000,
                                                       static_cast<int>(g() % 20) - 12);
    const int32_t zero = static_cast<int32_t>(g() % 256) - 128;
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) {
      const uint32_t pick = g() % 8;
      if (pick == 0) {
        v = specials[g() % (sizeof(specials) / sizeof(specials[0]))];
      } else if (pick == 1) {  // exact ties k + 1/2 times the scale
        v = (static_cast<float>(static_cast<int>(g() % 400) - 200) + 0.5f) * scale;
      } else {
        uint32_t u = g();
        u = (u & 0x807FFFFFu) | ((100u + u % 60u) << 23);
        std::memcpy(&v, &u, sizeof v);
      }
    }
    std::vector<int32_t> sym(static_cast<size_t>(n)), aff(static_cast<size_t>(n));
    quantize_symmetric_row(x.data(), n, scale, bits, sym.data());
    quantize_affine_row(x.data(), n, scale, zero, bits, aff.data());
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(i);
      ASSERT_EQ(sym[k], quantize_symmetric(x[k], scale, bits)) << x[k] << " / " << scale;
      ASSERT_EQ(aff[k], quantize_affine(x[k], scale, zero, bits)) << x[k] << " / " << scale;
    }
  }
}

}  // namespace
}  // namespace qbc::numerics
