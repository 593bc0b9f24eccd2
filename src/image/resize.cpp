// Pillow-exact 8-bit resampling (qbc/image/resize.h).
#include "qbc/image/resize.h"

#include <algorithm>
#include <cmath>

#include "qbc/support/check.h"

namespace qbc::image {
namespace {

double support_of(Filter f) {
  switch (f) {
    case Filter::kLanczos:
      return 3.0;
    case Filter::kBicubic:
      return 2.0;
    case Filter::kBilinear:
      return 1.0;
  }
  return 1.0;
}

// Pillow's sinc_filter.
double sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= M_PI;
  return std::sin(x) / x;
}

uint8_t clip8(int32_t acc) {
  const int32_t v = acc >> kResamplePrecisionBits;  // arithmetic: floor
  return static_cast<uint8_t>(std::clamp(v, 0, 255));
}

// One pass over `rows` rows of `in` (row stride in_stride pixels) along x: out has
// kernel.first.size() pixels per row. Rows start at row0 of `in`.
void pass_horizontal(const uint8_t* in, int32_t in_width, int32_t row0, int32_t rows,
                     const AxisKernel& k, uint8_t* out) {
  const size_t out_width = k.first.size();
  for (int32_t y = 0; y < rows; ++y) {
    const uint8_t* src = in + static_cast<size_t>(row0 + y) * static_cast<size_t>(in_width) * 3;
    uint8_t* dst = out + static_cast<size_t>(y) * out_width * 3;
    for (size_t x = 0; x < out_width; ++x) {
      const int32_t* w = &k.weights[x * static_cast<size_t>(k.ksize)];
      int32_t acc[3] = {1 << (kResamplePrecisionBits - 1), 1 << (kResamplePrecisionBits - 1),
                        1 << (kResamplePrecisionBits - 1)};
      for (int32_t j = 0; j < k.count[x]; ++j) {
        const uint8_t* p = src + static_cast<size_t>(k.first[x] + j) * 3;
        for (int c = 0; c < 3; ++c) acc[c] += p[c] * w[j];
      }
      for (int c = 0; c < 3; ++c) dst[x * 3 + static_cast<size_t>(c)] = clip8(acc[c]);
    }
  }
}

// One pass along y: in has the rows the kernel reads, starting at `row0` (the kernel's first
// row is relative to the image, so row0 is subtracted).
void pass_vertical(const uint8_t* in, int32_t width, int32_t row0, const AxisKernel& k,
                   uint8_t* out) {
  const size_t stride = static_cast<size_t>(width) * 3;
  for (size_t y = 0; y < k.first.size(); ++y) {
    const int32_t* w = &k.weights[y * static_cast<size_t>(k.ksize)];
    uint8_t* dst = out + y * stride;
    for (size_t i = 0; i < stride; ++i) {
      int32_t acc = 1 << (kResamplePrecisionBits - 1);
      for (int32_t j = 0; j < k.count[y]; ++j)
        acc += in[static_cast<size_t>(k.first[y] - row0 + j) * stride + i] * w[j];
      dst[i] = clip8(acc);
    }
  }
}

}  // namespace

double filter_weight(Filter f, double x) {
  // Pillow's lanczos_filter: the truncated sinc on [-3, 3), evaluated at the signed distance.
  if (f == Filter::kLanczos) return -3.0 <= x && x < 3.0 ? sinc(x) * sinc(x / 3.0) : 0.0;
  if (x < 0.0) x = -x;
  if (f == Filter::kBilinear) return x < 1.0 ? 1.0 - x : 0.0;
  constexpr double a = -0.5;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

AxisKernel axis_kernel(int32_t in_size, int32_t out_size, Filter f) {
  QBC_CHECK(in_size > 0 && out_size > 0);
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = support_of(f) * filterscale;
  const double ss = 1.0 / filterscale;
  AxisKernel k;
  k.ksize = static_cast<int32_t>(std::ceil(support)) * 2 + 1;
  k.first.resize(static_cast<size_t>(out_size));
  k.count.resize(static_cast<size_t>(out_size));
  k.weights.assign(static_cast<size_t>(out_size) * static_cast<size_t>(k.ksize), 0);
  std::vector<double> w(static_cast<size_t>(k.ksize));
  for (int32_t i = 0; i < out_size; ++i) {
    const double center = (i + 0.5) * scale;
    // C truncation toward zero, as Pillow's (int) casts.
    const int32_t lo = std::max(static_cast<int32_t>(center - support + 0.5), 0);
    const int32_t hi = std::min(static_cast<int32_t>(center + support + 0.5), in_size);
    const int32_t n = hi - lo;
    double sum = 0.0;
    for (int32_t j = 0; j < n; ++j) {
      w[static_cast<size_t>(j)] = filter_weight(f, (j + lo - center + 0.5) * ss);
      sum += w[static_cast<size_t>(j)];
    }
    int32_t* out = &k.weights[static_cast<size_t>(i) * static_cast<size_t>(k.ksize)];
    for (int32_t j = 0; j < n; ++j) {
      const double v = sum != 0.0 ? w[static_cast<size_t>(j)] / sum : w[static_cast<size_t>(j)];
      const double s = v * (1 << kResamplePrecisionBits);
      out[j] = static_cast<int32_t>(v < 0 ? -0.5 + s : 0.5 + s);
    }
    k.first[static_cast<size_t>(i)] = lo;
    k.count[static_cast<size_t>(i)] = n;
  }
  return k;
}

Image resize(const Image& src, int32_t width, int32_t height, Filter f) {
  QBC_CHECK(width > 0 && height > 0 && src.width > 0 && src.height > 0);
  if (width == src.width && height == src.height) return src;
  const AxisKernel kx = axis_kernel(src.width, width, f);
  const AxisKernel ky = axis_kernel(src.height, height, f);
  // Pillow's horizontal pass covers only the rows the vertical pass reads.
  const int32_t row0 = ky.first.front();
  const int32_t row_end = ky.first.back() + ky.count.back();
  Image tmp;
  const Image* in = &src;
  int32_t in_row0 = 0;
  if (width != src.width) {
    tmp.width = width;
    tmp.height = row_end - row0;
    tmp.rgb.resize(static_cast<size_t>(tmp.width) * static_cast<size_t>(tmp.height) * 3);
    pass_horizontal(src.rgb.data(), src.width, row0, tmp.height, kx, tmp.rgb.data());
    in = &tmp;
    in_row0 = row0;
  }
  if (height == src.height) return tmp;  // horizontal only (then row0 = 0, all rows)
  Image out;
  out.width = width;
  out.height = height;
  out.rgb.resize(static_cast<size_t>(width) * static_cast<size_t>(height) * 3);
  pass_vertical(in->rgb.data(), width, in_row0, ky, out.rgb.data());
  return out;
}

Image crop(const Image& src, int32_t top, int32_t left, int32_t height, int32_t width) {
  QBC_CHECK(top >= 0 && left >= 0 && top + height <= src.height && left + width <= src.width);
  Image out;
  out.width = width;
  out.height = height;
  out.rgb.resize(static_cast<size_t>(width) * static_cast<size_t>(height) * 3);
  for (int32_t y = 0; y < height; ++y) {
    const uint8_t* s =
        &src.rgb[(static_cast<size_t>(top + y) * static_cast<size_t>(src.width) + left) * 3];
    std::copy(s, s + static_cast<size_t>(width) * 3,
              &out.rgb[static_cast<size_t>(y) * static_cast<size_t>(width) * 3]);
  }
  return out;
}

}  // namespace qbc::image
