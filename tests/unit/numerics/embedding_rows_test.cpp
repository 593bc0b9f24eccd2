// The 8-bit host embedding's row quantizer (docs/numerics.md "8-bit embedding"): exact codes
// and scales for small hand rows, zero rows, a row with one huge value, ties to even, and rows
// holding a value that is not finite.
#include "qbc/numerics/embedding_rows.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "qbc/numerics/quantizer.h"

namespace qbc::numerics {
namespace {

struct RowCase {
  std::string name;
  std::vector<float> row;      // hidden = 4
  float scale;                 // the expected fp32 scale
  std::vector<int8_t> codes;   // the expected codes
};

TEST(EmbeddingRows, HandRowsGiveTheirCodesAndScales) {
  const std::vector<RowCase> cases = {
      {"max 127: scale 1", {1.0f, -2.0f, 0.5f, 127.0f}, 1.0f, {1, -2, 0, 127}},
      {"ties to even: 63.5 -> 64, -0.5 -> 0", {-254.0f, 127.0f, 64.0f, -1.0f}, 2.0f,
       {-127, 64, 32, 0}},
      {"zero row: the smallest scale, codes 0", {0.0f, 0.0f, 0.0f, 0.0f}, kMinScale, {0, 0, 0, 0}},
      {"negative extreme", {-3.0f, 0.0f, 1.0f, 0.0f}, static_cast<float>(3.0 / 127.0),
       {-127, 0, 42, 0}},
      {"one huge value flushes the rest to 0", {1e6f, 1.0f, -1.0f, 0.001f},
       static_cast<float>(1e6 / 127.0), {127, 0, 0, 0}},
      {"values below the smallest scale", {1e-12f, -1e-12f, 0.0f, 0.0f}, kMinScale, {0, 0, 0, 0}},
  };
  for (const RowCase& c : cases) {
    std::vector<int8_t> codes(4, 99);
    float scale = -1.0f;
    EXPECT_EQ(quantize_embedding_rows(c.row.data(), 1, 4, codes.data(), &scale), -1) << c.name;
    EXPECT_EQ(scale, c.scale) << c.name;
    EXPECT_EQ(codes, c.codes) << c.name;
  }
}

// Several rows at once: each row its own scale, codes laid out row after row.
TEST(EmbeddingRows, RowsAreIndependent) {
  const std::vector<float> table = {1.0f, -2.0f, 0.5f, 127.0f, -254.0f, 127.0f, 64.0f, -1.0f};
  std::vector<int8_t> codes(8);
  std::vector<float> scales(2);
  ASSERT_EQ(quantize_embedding_rows(table.data(), 2, 4, codes.data(), scales.data()), -1);
  EXPECT_EQ(scales, (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(codes, (std::vector<int8_t>{1, -2, 0, 127, -127, 64, 32, 0}));
}

// The lookup: one fp32 multiply a value, exactly code · scale.
TEST(EmbeddingRows, DequantizedRowIsCodeTimesScale) {
  const std::vector<int8_t> codes = {-127, 64, 32, 0};
  std::vector<float> out(4);
  dequantize_embedding_row(codes.data(), 2.0f, 4, out.data());
  EXPECT_EQ(out, (std::vector<float>{-254.0f, 128.0f, 64.0f, 0.0f}));
  const float s = static_cast<float>(3.0 / 127.0);
  const std::vector<int8_t> c2 = {-127, 1};
  dequantize_embedding_row(c2.data(), s, 2, out.data());
  EXPECT_EQ(out[0], -127.0f * s);
  EXPECT_EQ(out[1], s);
}

// A NaN or an infinity anywhere: the index of the first such row; rows before it are written.
TEST(EmbeddingRows, NonFiniteRowIsReported) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float bad : {inf, -inf, nan}) {
    const std::vector<float> table = {1.0f, 0.0f, 0.0f, 127.0f, 0.0f, bad, 1.0f, 1.0f};
    std::vector<int8_t> codes(8, 0);
    std::vector<float> scales(2, 0.0f);
    EXPECT_EQ(quantize_embedding_rows(table.data(), 2, 4, codes.data(), scales.data()), 1);
    EXPECT_EQ(scales[0], 1.0f);
    EXPECT_EQ(codes[3], 127);
  }
}

}  // namespace
}  // namespace qbc::numerics
