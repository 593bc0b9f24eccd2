// layer_norm (docs/numerics.md "layer_norm"), bit for bit: hand-worked rows whose mean,
// variance and reciprocal square root are exact, so the expected fp16 values follow from the
// spec's formula alone; a mean-zero row without bias gives rms_norm's bits; and random rows
// agree with a long-double evaluation of the textbook formula to within one fp16 step.
#include "qbc/numerics/norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "qbc/numerics/fp16.h"

namespace qbc::numerics {
namespace {

struct LayerNormCase {
  const char* name;
  std::vector<float> x, w, b;  // b empty: no bias
  double eps;
  int64_t rows;
  std::vector<uint16_t> want;  // fp16 bit patterns
};

class LayerNormTable : public ::testing::TestWithParam<LayerNormCase> {};

TEST_P(LayerNormTable, GivesTheSpecifiedBits) {
  const LayerNormCase& c = GetParam();
  const int64_t n = static_cast<int64_t>(c.x.size()) / c.rows;
  std::vector<float> y(c.x.size());
  layer_norm(c.x.data(), c.rows, n, c.w.data(), c.b.empty() ? nullptr : c.b.data(), c.eps,
             y.data());
  ASSERT_EQ(y.size(), c.want.size());
  for (size_t i = 0; i < y.size(); ++i)
    EXPECT_EQ(fp16_bits(y[i]), c.want[i]) << c.name << " element " << i << ": " << y[i];
}

// fp16 bit patterns (IEEE 754 binary16): 1.0 = 0x3C00, -1.0 = 0xBC00, 0.5 = 0x3800,
// 2.0 = 0x4000, -1.75 = 0xBF00, 1.5 = 0x3E00, 0.25 = 0x3400, -3.0 = 0xC200, 0 = 0x0000;
// 0.1f rounded to fp16 is 0x2E66 (0.0999755859375), -0.1f 0xAE66.
INSTANTIATE_TEST_SUITE_P(
    Cases, LayerNormTable,
    ::testing::Values(
        // mean 2, deviations ±1, variance 1, r = 1.
        LayerNormCase{
            "unit", {1, 3, 1, 3}, {1, 1, 1, 1}, {}, 0.0, 1, {0xBC00, 0x3C00, 0xBC00, 0x3C00}},
        // ((x − mean) · r) · w + b with r = 1: (−1)·2 + 0.25, 1·0.5 + 0, (−1)(−1) + 1, 1·4 − 3.
        LayerNormCase{"weight_and_bias",
                      {1, 3, 1, 3},
                      {2, 0.5f, -1, 4},
                      {0.25f, 0, 1, -3},
                      0.0,
                      1,
                      {0xBF00, 0x3800, 0x4000, 0x3C00}},
        // var 1, eps 3: r = 1 / sqrt(4) = 0.5.
        LayerNormCase{"eps", {0, 2}, {1, 1}, {}, 3.0, 1, {0xB800, 0x3800}},
        // A constant row: every deviation 0, so y = b (eps keeps r finite).
        LayerNormCase{"constant_row",
                      {7, 7, 7, 7},
                      {3, 3, 3, 3},
                      {1.5f, 0, -3, 0.25f},
                      1.0,
                      1,
                      {0x3E00, 0x0000, 0xC200, 0x3400}},
        // Each row its own mean: [10, 30] → ∓1; [-4, -2] → ∓1, times w = 0.1f → fp16(∓0.1f).
        LayerNormCase{
            "rows", {10, 30, -4, -2}, {0.1f, 0.1f}, {}, 0.0, 2, {0xAE66, 0x2E66, 0xAE66, 0x2E66}},
        // A large common offset: 2^24 and 2^24 + 2 (exact in fp32) have mean 2^24 + 1; the
        // deviations are taken before squaring, so the variance is exactly 1.
        LayerNormCase{"offset", {16777216.0f, 16777218.0f}, {1, 1}, {}, 0.0, 1, {0xBC00, 0x3C00}}),
    [](const ::testing::TestParamInfo<LayerNormCase>& i) { return std::string(i.param.name); });

std::vector<float> random_row(size_t n, uint32_t seed, double scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = round_fp16(u(rng));
  return v;
}

// A row of pairs (a, −a) sums to exactly 0 in index order, so mean = 0, x − mean = x and the
// variance is rms_norm's mean square: with no bias the two norms give the same bits.
TEST(LayerNorm, MeanZeroRowWithoutBiasEqualsRmsNorm) {
  const int64_t n = 64, s = 3;
  std::vector<float> x(static_cast<size_t>(n * s));
  for (int64_t r = 0; r < s; ++r) {
    const std::vector<float> half = random_row(static_cast<size_t>(n / 2), 40 + r, 6.0);
    for (int64_t i = 0; i < n / 2; ++i) {
      x[static_cast<size_t>(r * n + 2 * i)] = half[static_cast<size_t>(i)];
      x[static_cast<size_t>(r * n + 2 * i + 1)] = -half[static_cast<size_t>(i)];
    }
  }
  const std::vector<float> w = random_row(static_cast<size_t>(n), 9, 2.0);
  std::vector<float> ln(x.size()), rms(x.size());
  layer_norm(x.data(), s, n, w.data(), nullptr, 1e-5, ln.data());
  rms_norm(x.data(), s, n, w, 1e-5, 0.0, 0, rms.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(fp16_bits(ln[i]), fp16_bits(rms[i])) << i;
}

/// fp16 values in order: adjacent fp16 values have adjacent ordinals (±0 both 0).
int ordinal(float v) {
  const uint16_t b = fp16_bits(v);
  return (b & 0x8000) ? -static_cast<int>(b & 0x7FFF) : static_cast<int>(b);
}

// The textbook LayerNorm in long double, rounded to fp16, is never more than one fp16 step
// away (the two differ only in how the last fp64 bits round), and the output is finite.
TEST(LayerNorm, RandomRowsAgreeWithLongDoubleWithinOneStep) {
  const int64_t n = 384, s = 5;
  const std::vector<float> x = random_row(static_cast<size_t>(n * s), 1, 50.0);
  const std::vector<float> w = random_row(static_cast<size_t>(n), 2, 1.5);
  const std::vector<float> b = random_row(static_cast<size_t>(n), 3, 0.5);
  std::vector<float> y(x.size());
  layer_norm(x.data(), s, n, w.data(), b.data(), 1e-5, y.data());
  int exact = 0;
  for (int64_t r = 0; r < s; ++r) {
    long double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mean += x[static_cast<size_t>(r * n + i)];
    mean /= n;
    for (int64_t i = 0; i < n; ++i) {
      const long double d = x[static_cast<size_t>(r * n + i)] - mean;
      var += d * d;
    }
    var /= n;
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(r * n + i);
      const long double want = (x[k] - mean) / std::sqrt(var + 1e-5L) * w[static_cast<size_t>(i)] +
                               b[static_cast<size_t>(i)];
      const float ref = round_fp16(static_cast<double>(want));
      ASSERT_TRUE(std::isfinite(y[k]));
      EXPECT_LE(std::abs(ordinal(y[k]) - ordinal(ref)), 1) << k << ": " << y[k] << " vs " << ref;
      exact += fp16_bits(y[k]) == fp16_bits(ref);
    }
  }
  EXPECT_GT(exact, n * s * 99 / 100);  // nearly every value lands on the same fp16
}

}  // namespace
}  // namespace qbc::numerics
