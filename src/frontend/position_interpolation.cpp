// Position tables resampled (qbc/frontend/position_interpolation.h): bicubic_position_rows is
// PyTorch's upsample_bicubic2d (aten/src/ATen/native/UpSample.h: area_pixel_compute_source_index
// with cubic = true, get_cubic_upsample_coefficients, upsample_get_value_bounded);
// linspace_bilinear_position_rows is transformers' Qwen3-VL fast_pos_embed_interpolate.
#include "qbc/frontend/position_interpolation.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace qbc::frontend {
namespace {

constexpr double kA = -0.75;  // PyTorch's cubic convolution constant

double near_weight(double x) { return ((kA + 2) * x - (kA + 3)) * x * x + 1; }  // |x| <= 1
double far_weight(double x) {
  return ((kA * x - 5 * kA) * x + 8 * kA) * x - 4 * kA;
}  // 1 < |x| < 2

/// The four source indices (clamped) and weights of output index `i` of `out` along a side of
/// `in`.
struct Taps {
  std::array<int64_t, 4> index;
  std::array<double, 4> weight;
};

Taps taps(int64_t i, int64_t in, int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double src = scale * (static_cast<double>(i) + 0.5) - 0.5;  // not clamped for cubic
  const double base = std::floor(src);
  const double t = src - base;
  Taps k;
  k.weight = {far_weight(t + 1), near_weight(t), near_weight(1 - t), far_weight(2 - t)};
  for (int j = 0; j < 4; ++j)
    k.index[static_cast<size_t>(j)] =
        std::clamp(static_cast<int64_t>(base) - 1 + j, int64_t{0}, in - 1);
  return k;
}

/// The grid, width and sizes of a resampling: kInvalidArgument naming them when `table` is
/// not side² rows of `width` or a size is not positive.
Status check_sizes(const std::vector<float>& table, int64_t side, int64_t width, int64_t out_h,
                   int64_t out_w) {
  if (side <= 0 || width <= 0 || out_h <= 0 || out_w <= 0 ||
      static_cast<int64_t>(table.size()) != side * side * width) {
    return invalid_argument("position table of ", table.size(), " values resampled from a ", side,
                            " x ", side, " grid of width ", width, " to ", out_h, " x ", out_w);
  }
  return ok_status();
}

/// A linspace sample point along a side: the lower and upper rows and the fraction between.
struct LinTap {
  int64_t lo, hi;
  double frac;
};

/// torch.linspace(0, side - 1, n): .int() truncates, the upper neighbour is clipped.
std::vector<LinTap> linspace_taps(int64_t side, int64_t n) {
  std::vector<LinTap> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double x = n == 1 ? 0.0
                            : static_cast<double>(i) * static_cast<double>(side - 1) /
                                  static_cast<double>(n - 1);
    const auto lo = static_cast<int64_t>(x);
    out[static_cast<size_t>(i)] = {lo, std::min(lo + 1, side - 1), x - static_cast<double>(lo)};
  }
  return out;
}

}  // namespace

StatusOr<std::vector<float>> linspace_bilinear_position_rows(const std::vector<float>& table,
                                                             int64_t side, int64_t width,
                                                             int64_t out_h, int64_t out_w) {
  QBC_RETURN_IF_ERROR(check_sizes(table, side, width, out_h, out_w));
  const std::vector<LinTap> rows = linspace_taps(side, out_h), cols = linspace_taps(side, out_w);
  std::vector<float> out(static_cast<size_t>(out_h * out_w * width));
  const auto at = [&](int64_t r, int64_t c, int64_t e) {
    return static_cast<double>(table[static_cast<size_t>((r * side + c) * width + e)]);
  };
  for (int64_t y = 0; y < out_h; ++y) {
    for (int64_t x = 0; x < out_w; ++x) {
      const LinTap& ty = rows[static_cast<size_t>(y)];
      const LinTap& tx = cols[static_cast<size_t>(x)];
      float* dst = out.data() + (y * out_w + x) * width;
      for (int64_t e = 0; e < width; ++e) {
        const double v = at(ty.lo, tx.lo, e) * (1 - ty.frac) * (1 - tx.frac) +
                         at(ty.lo, tx.hi, e) * (1 - ty.frac) * tx.frac +
                         at(ty.hi, tx.lo, e) * ty.frac * (1 - tx.frac) +
                         at(ty.hi, tx.hi, e) * ty.frac * tx.frac;
        dst[e] = static_cast<float>(v);
      }
    }
  }
  return out;
}

StatusOr<std::vector<float>> bicubic_position_rows(const std::vector<float>& table, int64_t side,
                                                   int64_t width, int64_t out_h, int64_t out_w) {
  QBC_RETURN_IF_ERROR(check_sizes(table, side, width, out_h, out_w));
  std::vector<Taps> rows(static_cast<size_t>(out_h)), cols(static_cast<size_t>(out_w));
  for (int64_t i = 0; i < out_h; ++i) rows[static_cast<size_t>(i)] = taps(i, side, out_h);
  for (int64_t i = 0; i < out_w; ++i) cols[static_cast<size_t>(i)] = taps(i, side, out_w);
  std::vector<float> out(static_cast<size_t>(out_h * out_w * width));
  std::vector<double> acc(static_cast<size_t>(width));
  for (int64_t y = 0; y < out_h; ++y) {
    for (int64_t x = 0; x < out_w; ++x) {
      std::fill(acc.begin(), acc.end(), 0.0);
      const Taps& ty = rows[static_cast<size_t>(y)];
      const Taps& tx = cols[static_cast<size_t>(x)];
      for (size_t a = 0; a < 4; ++a) {
        for (size_t b = 0; b < 4; ++b) {
          const double w = ty.weight[a] * tx.weight[b];
          const float* src = table.data() + (ty.index[a] * side + tx.index[b]) * width;
          for (int64_t e = 0; e < width; ++e) acc[static_cast<size_t>(e)] += w * src[e];
        }
      }
      float* dst = out.data() + (y * out_w + x) * width;
      for (int64_t e = 0; e < width; ++e) dst[e] = static_cast<float>(acc[static_cast<size_t>(e)]);
    }
  }
  return out;
}

}  // namespace qbc::frontend
