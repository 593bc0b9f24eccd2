// Pillow's resampling (qbc/image/resize.h): kernels and outputs worked out by hand from
// libImaging/Resample.c's algorithm (weights in double, normalized, rounded to 22-bit fixed
// point; horizontal pass into 8 bits, then vertical).
#include "qbc/image/resize.h"

#include <gtest/gtest.h>

#include <vector>

namespace qbc::image {
namespace {

struct KernelCase {
  const char* what;
  int32_t in, out;
  Filter filter;
  int32_t output;  // the output pixel checked
  int32_t first, count;
  std::vector<int32_t> weights;  // count of them, scaled by 2^22 = 4194304
};

// Downscale 4 -> 2 bilinear: scale 2 stretches the triangle to support 2. Pixel 0: center 1.0,
// taps 0..2 at distances (j - 1 + 0.5) / 2 = -0.25, 0.25, 0.75: weights 0.75, 0.75, 0.25,
// normalized 3/7, 3/7, 1/7: 1797558.86 -> 1797559, 599186.29 -> 599186.
// Upscale 2 -> 4 bilinear: pixel 1 center 0.75, taps 0..1 at -0.25, 0.75: 0.75, 0.25.
// Upscale 2 -> 4 bicubic (a = -0.5): pixel 1 center 0.75, taps at -0.25 and 0.75:
// 0.8671875 and 0.2265625, normalized by 1.09375: 0.7928571 * 2^22 = 3325483.9 -> 3325484,
// 0.2071429 * 2^22 = 868820.1 -> 868820.
// Pixel 0 center 0.25: taps at 0.25 and 1.25: 0.8671875 and -0.0703125, normalized by
// 0.796875: 1.0882353 -> 4564390, -0.0882353 -> -370086 (negative: rounded by -0.5).
const KernelCase kKernels[] = {
    {"bilinear 4->2 px0", 4, 2, Filter::kBilinear, 0, 0, 3, {1797559, 1797559, 599186}},
    {"bilinear 4->2 px1", 4, 2, Filter::kBilinear, 1, 1, 3, {599186, 1797559, 1797559}},
    {"bilinear 2->4 px0", 2, 4, Filter::kBilinear, 0, 0, 1, {4194304}},
    {"bilinear 2->4 px1", 2, 4, Filter::kBilinear, 1, 0, 2, {3145728, 1048576}},
    {"bicubic 2->4 px1", 2, 4, Filter::kBicubic, 1, 0, 2, {3325484, 868820}},
    {"bicubic 2->4 px0", 2, 4, Filter::kBicubic, 0, 0, 2, {4564390, -370086}},
    // Lanczos (support 3, sinc(x)·sinc(x/3)), the weights from Resample.c's formulas evaluated
    // in Python's double math: 4 -> 2 stretches the support to 6, so pixel 0 (center 1.0) reads
    // all four inputs at -0.25, 0.25, 0.75, 1.25 (0.8651, 0.8651, 0.2626, -0.1291 before the
    // normalization); 8 -> 3 pixel 1 reads all eight, symmetric about its center 4.0.
    {"lanczos 4->2 px0", 4, 2, Filter::kLanczos, 0, 0, 4, {1946964, 1946964, 591023, -290647}},
    {"lanczos 2->4 px1", 2, 4, Filter::kLanczos, 1, 0, 2, {3217574, 976730}},
    {"lanczos 3->8 px0", 3, 8, Filter::kLanczos, 0, 0, 3, {4851787, -839224, 181741}},
    {"lanczos 8->3 px1",
     8,
     3,
     Filter::kLanczos,
     1,
     0,
     8,
     {-219821, 85701, 799678, 1431593, 1431593, 799678, 85701, -219821}},
};

TEST(ResizeTest, KernelsMatchPillowsByHand) {
  for (const KernelCase& c : kKernels) {
    const AxisKernel k = axis_kernel(c.in, c.out, c.filter);
    const auto o = static_cast<size_t>(c.output);
    EXPECT_EQ(k.first[o], c.first) << c.what;
    ASSERT_EQ(k.count[o], c.count) << c.what;
    for (int32_t j = 0; j < c.count; ++j)
      EXPECT_EQ(k.weights[o * static_cast<size_t>(k.ksize) + static_cast<size_t>(j)],
                c.weights[static_cast<size_t>(j)])
          << c.what << " tap " << j;
  }
}

TEST(ResizeTest, BicubicWeightsAreKeysCubic) {
  EXPECT_DOUBLE_EQ(filter_weight(Filter::kBicubic, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(filter_weight(Filter::kBicubic, 1.0), 0.0);
  EXPECT_DOUBLE_EQ(filter_weight(Filter::kBicubic, 1.5), -0.0625);  // ((1.5-5)1.5+8)1.5-4 = .125
  EXPECT_DOUBLE_EQ(filter_weight(Filter::kBicubic, -0.5), 0.5625);
  EXPECT_DOUBLE_EQ(filter_weight(Filter::kBicubic, 2.0), 0.0);
  EXPECT_DOUBLE_EQ(filter_weight(Filter::kBilinear, -0.25), 0.75);
}

TEST(ResizeTest, LanczosIsTheTruncatedSincOnMinusThreeToThree) {
  EXPECT_DOUBLE_EQ(filter_weight(Filter::kLanczos, 0.0), 1.0);
  EXPECT_NEAR(filter_weight(Filter::kLanczos, 0.5), 0.6079271018540267, 1e-15);
  EXPECT_NEAR(filter_weight(Filter::kLanczos, -2.5), 0.024317084074161062, 1e-15);
  EXPECT_NEAR(filter_weight(Filter::kLanczos, 1.0), 0.0, 1e-15);
  // Pillow's interval is [-3, 3): -3 is evaluated (sin(3π) is not exactly 0 in double), 3 is not.
  EXPECT_NE(filter_weight(Filter::kLanczos, -3.0), 0.0);
  EXPECT_EQ(filter_weight(Filter::kLanczos, 3.0), 0.0);
  EXPECT_EQ(filter_weight(Filter::kLanczos, 3.5), 0.0);
}

Image row(std::initializer_list<int> gray) {
  Image im;
  im.width = static_cast<int32_t>(gray.size());
  im.height = 1;
  for (int v : gray) im.rgb.insert(im.rgb.end(), 3, static_cast<uint8_t>(v));
  return im;
}

TEST(ResizeTest, BilinearDownscaleOfARow) {
  // 4 -> 2 of [0, 100, 200, 255]: 100 * 3/7 + 200 / 7 = 71.4 -> 71;
  // 100 / 7 + 200 * 3/7 + 255 * 3/7 = 209.3 -> 209.
  const Image out = resize(row({0, 100, 200, 255}), 2, 1, Filter::kBilinear);
  ASSERT_EQ(out.width, 2);
  EXPECT_EQ(out.at(0, 0, 0), 71);
  EXPECT_EQ(out.at(0, 1, 1), 209);
}

TEST(ResizeTest, BicubicOvershootIsClampedPerPass) {
  // 2 -> 4 of [0, 255]: pixel 0 is 255 * -0.088 < 0 -> 0; pixel 1 is 255 * 0.2071 = 52.8 -> 53;
  // pixels 2, 3 mirror them: 255 - 53 = 202 and 255 (overshoot above 255 clamped).
  const Image out = resize(row({0, 255}), 4, 1, Filter::kBicubic);
  ASSERT_EQ(out.width, 4);
  EXPECT_EQ(out.at(0, 0, 2), 0);
  EXPECT_EQ(out.at(0, 1, 2), 53);
  EXPECT_EQ(out.at(0, 2, 2), 202);
  EXPECT_EQ(out.at(0, 3, 2), 255);
}

TEST(ResizeTest, TheHorizontalPassRoundsBeforeTheVerticalOne) {
  // 2x2 [[0, 1], [0, 0]] -> 1x1 bilinear: weights 1/2, 1/2 on both axes. Exact: 0.25 -> 0.
  // Pillow: the rows round to 1 (0.5 rounds up) and 0, then the column to 1 (0.5 again).
  Image im;
  im.width = im.height = 2;
  im.rgb = {0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0};
  const Image out = resize(im, 1, 1, Filter::kBilinear);
  EXPECT_EQ(out.at(0, 0, 0), 1);
}

TEST(ResizeTest, SameSizeIsACopyAndOneAxisResizesOnlyIt) {
  const Image src = row({5, 6, 7});
  EXPECT_EQ(resize(src, 3, 1, Filter::kBicubic).rgb, src.rgb);
  const Image tall = resize(src, 3, 2, Filter::kBilinear);  // vertical only: rows repeat
  ASSERT_EQ(tall.height, 2);
  for (int x = 0; x < 3; ++x) {
    EXPECT_EQ(tall.at(0, x, 0), 5 + x);
    EXPECT_EQ(tall.at(1, x, 0), 5 + x);
  }
}

TEST(ResizeTest, CropTakesTheRectangle) {
  Image im;
  im.width = 3;
  im.height = 2;
  for (int i = 0; i < 6; ++i) im.rgb.insert(im.rgb.end(), 3, static_cast<uint8_t>(i));
  const Image c = crop(im, 1, 1, 1, 2);
  ASSERT_EQ(c.width, 2);
  ASSERT_EQ(c.height, 1);
  EXPECT_EQ(c.at(0, 0, 0), 4);
  EXPECT_EQ(c.at(0, 1, 0), 5);
}

}  // namespace
}  // namespace qbc::image
