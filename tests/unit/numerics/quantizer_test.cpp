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

// The compact grouped weight image (docs/numerics.md "Compact grouped weights"): which scales
// are fp16, and how a scale is rounded. Expected values are IEEE binary16 facts (spacing
// 2^(e-10) in [2^e, 2^(e+1)), smallest subnormal 2^-24, largest finite 65504).
TEST(NumericsQuantizer, Fp16WeightScalesOnlyForGroups) {
  EXPECT_TRUE(fp16_weight_scales(4, 32));
  EXPECT_TRUE(fp16_weight_scales(4, 128));
  EXPECT_TRUE(fp16_weight_scales(8, 32));  // 8-bit groups too (the 8-bit head of W4V8)
  EXPECT_TRUE(fp16_weight_scales(8, 128));
  EXPECT_FALSE(fp16_weight_scales(4, 0));  // per channel: fp32
  EXPECT_FALSE(fp16_weight_scales(8, 0));
  EXPECT_FALSE(fp16_weight_scales(16, 32));  // 16-bit weights are not quantized
}

TEST(NumericsQuantizer, Fp16WeightScaleRoundsToNearestEven) {
  const struct {
    float s, want;
  } cases[] = {
      {1.0f, 1.0f},                                         // already fp16
      {1.0f + 0x1p-11f, 1.0f},                              // half a step above 1: tie to even (1)
      {1.0f + 3 * 0x1p-11f, 1.0f + 2 * 0x1p-10f},           // 1.5 steps: tie to even (step 2)
      {1.0f + 0x1p-11f + 0x1p-20f, 1.0f + 0x1p-10f},        // just above the tie: up
      {-(1.0f + 0x1p-11f + 0x1p-20f), -(1.0f + 0x1p-10f)},  // the sign is kept
      {0.01f, 0x1.47cp-7f},                                 // 0.01 -> 0.01000213623046875
      {0x1p-14f, 0x1p-14f},                                 // the smallest normal
      {3e-7f, 5 * 0x1p-24f},                                // a subnormal: 3e-7 / 2^-24 = 5.03
      {1e-8f, 0x1p-24f},                                    // below 2^-24: clamped up, never 0
      {-1e-8f, -0x1p-24f},
      {0.0f, 0x1p-24f},
      {70000.0f, 65504.0f},  // above the largest finite: clamped
      {65519.0f, 65504.0f},
  };
  for (const auto& c : cases) EXPECT_EQ(fp16_weight_scale(c.s), c.want) << c.s;
}

TEST(NumericsQuantizer, AffineParamsFp16ComputesTheZeroPointFromTheRoundedScale) {
  // span 0.15 / 15 = 0.01 -> fp16 0.01000213623046875 (0x1.47cp-7); neg_lo 0.0351 / that =
  // 3.509 -> 4; code 4 - 8 = -4.
  AffineParams a = affine_params_fp16(0.15, 0.0351, 4);
  EXPECT_EQ(a.scale, 0x1.47cp-7f);
  EXPECT_EQ(a.zero, -4);
  // The rounding moves the zero point: fp32(15 * 0.010005136 / 15) = 0.0100051 rounds down
  // to the same fp16 0x1.47cp-7; neg_lo 0.0350126 / 0.0100051 = 3.4995 -> 3 with the fp32
  // scale but / 0.0100021 = 3.5005 -> 4 with the fp16 one.
  const double span = 15 * 0.010005136;
  const AffineParams f32 = affine_params(span, 0.0350126, 4);
  a = affine_params_fp16(span, 0.0350126, 4);
  EXPECT_EQ(f32.zero, 3 - 8);
  EXPECT_EQ(a.zero, 4 - 8);
  EXPECT_EQ(a.scale, 0x1.47cp-7f);
  // Degenerate ranges keep a usable scale: 1e-8 clamps to 2^-24.
  a = affine_params_fp16(0, 0, 4);
  EXPECT_EQ(a.scale, 0x1p-24f);
  EXPECT_EQ(a.zero, -8);
}

TEST(NumericsQuantizer, AffineParamsFp16At8Bits) {
  // span 2.55 / 255 = fp32 0.0099999998 -> fp16 0x1.47cp-7 (0.01000213623046875); neg_lo
  // 0.35505 / fp32 scale = 35.505 -> 36, / the fp16 scale = 35.497 -> 35: the zero point is
  // the one of the rounded scale, a code of [-128, 127].
  const AffineParams f32 = affine_params(2.55, 0.35505, 8);
  const AffineParams a = affine_params_fp16(2.55, 0.35505, 8);
  EXPECT_EQ(f32.zero, 36 - 128);
  EXPECT_EQ(a.scale, 0x1.47cp-7f);
  EXPECT_EQ(a.zero, 35 - 128);
  // The whole unsigned range maps to the signed codes: neg_lo = span puts 0 at code 127.
  EXPECT_EQ(affine_params_fp16(2.55, 2.55, 8).zero, 127);
  EXPECT_EQ(affine_params_fp16(0, 0, 8).zero, -128);
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

TEST(NumericsQuantizer, ChannelQuantizerEqualsTheScalarRule) {
  // Per-channel scales and offsets (the KV cache's codes), 4- and 8-bit, lengths around the
  // four-lane step; values with ties, specials and offsets that cancel them.
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {0.0f,   -0.0f,   inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                            1e-45f, -3.0e38f};
  std::mt19937 g(31);
  for (int trial = 0; trial < 2000; ++trial) {
    const int64_t n = trial % 23;
    const int bits = trial % 2 ? 4 : 8;
    std::vector<float> x(static_cast<size_t>(n)), scale(x.size()), offset(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      scale[i] =
          std::ldexp(1.0f + static_cast<float>(g() % 1000) / 1000, static_cast<int>(g() % 12) - 8);
      offset[i] = g() % 3 == 0 ? 0.0f : static_cast<float>(static_cast<int>(g() % 200) - 100) / 64;
      const uint32_t pick = g() % 6;
      x[i] = pick == 0   ? specials[g() % (sizeof(specials) / sizeof(specials[0]))]
             : pick == 1 ? (static_cast<float>(static_cast<int>(g() % 40) - 20) + 0.5f) * scale[i] +
                               offset[i]
                         : static_cast<float>(static_cast<int>(g() % 20001) - 10000) / 997.0f;
    }
    std::vector<int32_t> got(x.size(), -7);
    quantize_symmetric_channels(x.data(), scale.data(), offset.data(), n, bits, got.data());
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(got[i], quantize_symmetric(x[i], scale[i], bits, offset[i]))
          << "trial " << trial << " x " << x[i] << " scale " << scale[i] << " offset " << offset[i];
  }
}

TEST(NumericsQuantizer, PerTokenAffineEqualsTheSequentialMinMax) {
  // The row's range as a loop of std::min / std::max from +0 would find it (the AVX path
  // keeps eight lanes): lengths around the lane width, NaNs (ignored), signed zeros,
  // infinities, all-positive and all-negative rows.
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {0.0f,
                            -0.0f,
                            inf,
                            -inf,
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::denorm_min(),
                            -1e-30f,
                            3.0e38f};
  std::mt19937 g(29);
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t n = trial % 41;
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) {
      const uint32_t pick = g() % 6;
      if (pick == 0) {
        v = specials[g() % (sizeof(specials) / sizeof(specials[0]))];
      } else {
        const float mag =
            std::ldexp(static_cast<float>(g() % 1000) / 999.0f, static_cast<int>(g() % 16) - 8);
        v = trial % 3 == 0 ? mag : trial % 3 == 1 ? -mag : (g() % 2 ? mag : -mag);
      }
    }
    float lo = 0.0f, hi = 0.0f;
    for (float v : x) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    const AffineParams want = affine_params(static_cast<double>(hi) - static_cast<double>(lo),
                                            -static_cast<double>(lo), 8);
    float scale = -1.0f;
    int32_t zero = -1;
    per_token_affine(x.data(), n, 8, &scale, &zero);
    uint32_t sb, wb;
    std::memcpy(&sb, &scale, 4);
    std::memcpy(&wb, &want.scale, 4);
    ASSERT_EQ(sb, wb) << "trial " << trial << " n " << n;
    ASSERT_EQ(zero, want.zero) << "trial " << trial << " n " << n;
  }
}

}  // namespace
}  // namespace qbc::numerics
