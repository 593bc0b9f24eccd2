// frontend::bicubic_position_rows against a float64 reference written from PyTorch's
// upsample_bicubic2d (aten/src/ATen/native/UpSample.h and UpSampleBicubic2d.cpp:
// area_pixel_compute_source_index(scale, i, align_corners = false, cubic = true),
// cubic_convolution1 / cubic_convolution2 with A = -0.75, upsample_get_value_bounded, and the
// row-then-column cubic_interp1d of upsample_bicubic2d_out_frame), as CLIP's and SigLIP's
// interpolate_pos_encoding call it: a [1, width, side, side] tensor to (out_h, out_w).
#include "qbc/frontend/position_interpolation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "qbc/frontend/clip_vision.h"
#include "test_support.h"

namespace qbc::frontend {
namespace {

double cubic1(double x, double a) { return ((a + 2) * x - (a + 3)) * x * x + 1; }
double cubic2(double x, double a) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; }

double cubic_interp1d(double x0, double x1, double x2, double x3, double t) {
  const double a = -0.75;
  const double c[4] = {cubic2(t + 1.0, a), cubic1(t, a), cubic1(1.0 - t, a), cubic2(2.0 - t, a)};
  return x0 * c[0] + x1 * c[1] + x2 * c[2] + x3 * c[3];
}

// One channel plane [side, side] -> [oh, ow].
std::vector<double> torch_bicubic_plane(const std::vector<double>& in, int64_t side, int64_t oh,
                                        int64_t ow) {
  const auto at = [&](int64_t y, int64_t x) {
    y = std::max<int64_t>(0, std::min(y, side - 1));
    x = std::max<int64_t>(0, std::min(x, side - 1));
    return in[static_cast<size_t>(y * side + x)];
  };
  const double hs = static_cast<double>(side) / static_cast<double>(oh);
  const double ws = static_cast<double>(side) / static_cast<double>(ow);
  std::vector<double> out(static_cast<size_t>(oh * ow));
  for (int64_t oy = 0; oy < oh; ++oy) {
    const double ry = hs * (static_cast<double>(oy) + 0.5) - 0.5;
    const auto iy = static_cast<int64_t>(std::floor(ry));
    const double ty = ry - static_cast<double>(iy);
    for (int64_t ox = 0; ox < ow; ++ox) {
      const double rx = ws * (static_cast<double>(ox) + 0.5) - 0.5;
      const auto ix = static_cast<int64_t>(std::floor(rx));
      const double tx = rx - static_cast<double>(ix);
      double rows[4];
      for (int64_t k = 0; k < 4; ++k)
        rows[k] = cubic_interp1d(at(iy - 1 + k, ix - 1), at(iy - 1 + k, ix), at(iy - 1 + k, ix + 1),
                                 at(iy - 1 + k, ix + 2), tx);
      out[static_cast<size_t>(oy * ow + ox)] =
          cubic_interp1d(rows[0], rows[1], rows[2], rows[3], ty);
    }
  }
  return out;
}

std::vector<float> random_table(int64_t side, int64_t width, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> t(static_cast<size_t>(side * side * width));
  for (float& v : t) v = n(rng);
  return t;
}

struct Case {
  int64_t side, width, oh, ow;
};

TEST(PositionInterpolation, MatchesTorchBicubicDownUpAndNonSquare) {
  const Case cases[] = {{24, 3, 16, 16}, {24, 2, 32, 32}, {7, 4, 5, 9}, {6, 1, 6, 6}, {5, 2, 1, 3}};
  for (const Case& c : cases) {
    const std::vector<float> table = random_table(c.side, c.width, 7);
    auto got = bicubic_position_rows(table, c.side, c.width, c.oh, c.ow);
    QBC_ASSERT_OK(got);
    ASSERT_EQ(got->size(), static_cast<size_t>(c.oh * c.ow * c.width));
    for (int64_t e = 0; e < c.width; ++e) {
      std::vector<double> plane(static_cast<size_t>(c.side * c.side));
      for (int64_t i = 0; i < c.side * c.side; ++i)
        plane[static_cast<size_t>(i)] = table[static_cast<size_t>(i * c.width + e)];
      const std::vector<double> want = torch_bicubic_plane(plane, c.side, c.oh, c.ow);
      for (int64_t i = 0; i < c.oh * c.ow; ++i) {
        const double g = (*got)[static_cast<size_t>(i * c.width + e)];
        ASSERT_NEAR(g, want[static_cast<size_t>(i)], 1e-6 * std::max(1.0, std::abs(g)))
            << c.side << "->" << c.oh << "x" << c.ow << " row " << i << " e " << e;
      }
    }
  }
}

TEST(PositionInterpolation, TheSameSizeIsTheTableItself) {
  const std::vector<float> table = random_table(6, 3, 11);
  auto got = bicubic_position_rows(table, 6, 3, 6, 6);
  QBC_ASSERT_OK(got);
  EXPECT_EQ(*got, table);  // source index i, weights (0, 1, 0, 0): exact
}

TEST(PositionInterpolation, ClipEmbedBaseAtAnotherSizeKeepsTheClassRowAndResamplesTheRest) {
  // A LLaVA-like CLIP: a 24 x 24 table of width 2 (+ the class position), compiled at 224.
  VisionConfig vc;
  vc.tower = VisionTower::kClip;
  vc.width = 2;
  vc.patch_size = 14;
  vc.image_size = 336;
  vc.position_grid = 24;
  const std::vector<float> patches = random_table(24, 2, 5);
  std::vector<float> table = {0.5f, -0.25f};  // the class row's position
  table.insert(table.end(), patches.begin(), patches.end());
  const std::vector<float> cls = {1.0f, 2.0f};
  const TensorFloats read = [&](const std::string& name, std::vector<float>* out) {
    *out = name.find("class_embedding") != std::string::npos ? cls : table;
    return ok_status();
  };
  auto native = clip_embed_base(vc, read);
  QBC_ASSERT_OK(native);
  ASSERT_EQ(native->size(), table.size());  // 336: the table itself, the class added to row 0
  EXPECT_EQ((*native)[0], 1.5f);
  EXPECT_EQ((*native)[2], table[2]);
  vc.image_size = 224;
  auto small = clip_embed_base(vc, read);
  QBC_ASSERT_OK(small);
  ASSERT_EQ(small->size(), static_cast<size_t>((1 + 16 * 16) * 2));
  EXPECT_EQ((*small)[0], 1.5f);
  EXPECT_EQ((*small)[1], 1.75f);
  for (int64_t e = 0; e < 2; ++e) {
    std::vector<double> plane(24 * 24);
    for (int64_t i = 0; i < 24 * 24; ++i)
      plane[static_cast<size_t>(i)] = patches[static_cast<size_t>(i * 2 + e)];
    const std::vector<double> want = torch_bicubic_plane(plane, 24, 16, 16);
    for (int64_t i = 0; i < 16 * 16; ++i)
      ASSERT_NEAR((*small)[static_cast<size_t>((1 + i) * 2 + e)], want[static_cast<size_t>(i)],
                  1e-6)
          << i << " e " << e;
  }
  // A table of another grid than position_grid is refused, naming the tensor.
  vc.position_grid = 23;
  auto bad = clip_embed_base(vc, read);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(testing::contains(bad.status().message(), "position_embedding"));
}

// Qwen3-VL's sampler (HF fast_pos_embed_interpolate): at the table's own size every point is
// a table row; a 2 x 2 table sampled 3 x 3 takes the corners, the edge midpoints and the centre
// as the mean of the four (linspace 0, 0.5, 1 on both sides).
TEST(PositionInterpolation, LinspaceBilinearSamplesAtLinspacePoints) {
  const std::vector<float> table = random_table(4, 3, 7);
  auto same = linspace_bilinear_position_rows(table, 4, 3, 4, 4);
  QBC_ASSERT_OK(same);
  EXPECT_EQ(*same, table);
  const std::vector<float> square = {1.0f, 2.0f, 3.0f, 5.0f};  // rows of width 1
  auto up = linspace_bilinear_position_rows(square, 2, 1, 3, 3);
  QBC_ASSERT_OK(up);
  EXPECT_EQ(*up, (std::vector<float>{1.0f, 1.5f, 2.0f, 2.0f, 2.75f, 3.5f, 3.0f, 4.0f, 5.0f}));
  auto one = linspace_bilinear_position_rows(square, 2, 1, 1, 2);  // a single row: linspace's 0
  QBC_ASSERT_OK(one);
  EXPECT_EQ(*one, (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(linspace_bilinear_position_rows(square, 3, 1, 2, 2).status().code(),
            Code::kInvalidArgument);
}

TEST(PositionInterpolation, BadShapesAreRefused) {
  const std::vector<float> table = random_table(4, 2, 1);
  EXPECT_EQ(bicubic_position_rows(table, 5, 2, 3, 3).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(bicubic_position_rows(table, 4, 2, 0, 3).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(bicubic_position_rows({}, 0, 2, 3, 3).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace qbc::frontend
