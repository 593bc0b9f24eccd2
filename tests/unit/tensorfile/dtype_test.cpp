// Tests for the element type table and the 16-bit float conversions.
#include "qbc/tensorfile/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace qbc::tensorfile {
namespace {

TEST(DTypeTest, NamesRoundTripAndSizes) {
  const DType all[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64,    DType::kI8,
                       DType::kU8,  DType::kI16, DType::kU16,  DType::kI32,    DType::kU32,
                       DType::kI64, DType::kU64, DType::kBool, DType::kF8E4M3, DType::kF8E5M2};
  for (DType d : all) {
    const std::optional<DType> parsed = parse_dtype(dtype_name(d));
    ASSERT_TRUE(parsed.has_value()) << dtype_name(d);
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(dtype_size(DType::kF32), 4u);
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  EXPECT_EQ(dtype_size(DType::kBool), 1u);
  EXPECT_EQ(dtype_name(DType::kBF16), "BF16");
  EXPECT_FALSE(parse_dtype("f32").has_value());  // Names are case-sensitive.
  EXPECT_FALSE(parse_dtype("").has_value());
  EXPECT_FALSE(parse_dtype("Q4_0").has_value());
}

TEST(DTypeTest, Fp16KnownValues) {
  EXPECT_EQ(fp16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(fp16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(fp16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(fp16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_f32(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(fp16_to_f32(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_TRUE(std::isinf(fp16_to_f32(0x7C00)));
  EXPECT_TRUE(std::isnan(fp16_to_f32(0x7E00)));
  EXPECT_TRUE(std::signbit(fp16_to_f32(0x8000)));
  EXPECT_EQ(fp16_to_f32(0x8000), 0.0f);
}

TEST(DTypeTest, Fp16RoundTripsEveryBitPattern) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float f = fp16_to_f32(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fp16_to_f32(f32_to_fp16(f)))) << b;
      continue;
    }
    ASSERT_EQ(f32_to_fp16(f), bits) << "bits " << b;
  }
}

TEST(DTypeTest, Fp16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie -> even
  EXPECT_EQ(f32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie -> even (up)
  EXPECT_EQ(f32_to_fp16(1.0f + std::ldexp(1.2f, -11)), 0x3C01);      // above tie -> up
  EXPECT_EQ(f32_to_fp16(65519.0f), 0x7BFF);
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7C00);  // overflow -> inf
  EXPECT_EQ(f32_to_fp16(-1e10f), 0xFC00);
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (zero)
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(f32_to_fp16(-std::ldexp(1.0f, -30)), 0x8000);
  // The largest subnormal rounds up into the smallest normal.
  EXPECT_EQ(f32_to_fp16(std::ldexp(1023.75f, -24)), 0x0400);
}

TEST(DTypeTest, Bf16RoundTripsAndRounds) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float f = bf16_to_f32(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f)))) << b;
      continue;
    }
    ASSERT_EQ(f32_to_bf16(f), bits) << "bits " << b;
  }
  EXPECT_EQ(bf16_to_f32(0x3F80), 1.0f);
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // tie -> even (up)
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DTypeTest, ConvertToF32HandlesUnalignedSources) {
  std::vector<uint8_t> buf(1 + 4 * 2);
  const uint16_t halves[4] = {0x3C00, 0xC000, 0x0000, 0x3800};  // 1, -2, 0, 0.5
  std::memcpy(buf.data() + 1, halves, sizeof(halves));
  float out[4] = {};
  ASSERT_TRUE(convert_to_f32(DType::kF16, buf.data() + 1, 4, out).ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_EQ(out[3], 0.5f);

  const uint8_t bytes[3] = {0x80, 0x7F, 0xFF};
  ASSERT_TRUE(convert_to_f32(DType::kI8, bytes, 3, out).ok());
  EXPECT_EQ(out[0], -128.0f);
  EXPECT_EQ(out[1], 127.0f);
  EXPECT_EQ(out[2], -1.0f);
  ASSERT_TRUE(convert_to_f32(DType::kU8, bytes, 3, out).ok());
  EXPECT_EQ(out[0], 128.0f);
  EXPECT_EQ(out[2], 255.0f);

  const double d = -3.25;
  ASSERT_TRUE(convert_to_f32(DType::kF64, reinterpret_cast<const uint8_t*>(&d), 1, out).ok());
  EXPECT_EQ(out[0], -3.25f);

  EXPECT_TRUE(dtype_converts_to_f32(DType::kBF16));
  EXPECT_FALSE(dtype_converts_to_f32(DType::kI32));
  const Status s = convert_to_f32(DType::kI32, bytes, 0, out);
  EXPECT_EQ(s.code(), Code::kUnimplemented);
  EXPECT_NE(s.message().find("I32"), std::string::npos);
}

}  // namespace
}  // namespace qbc::tensorfile
