// Resampling as Pillow's Image.resize does it for 8-bit images (libImaging/Resample.c), which
// is what the HF "slow" image processors call: a separable convolution whose kernel is
// stretched by the scale when downscaling (antialiasing), horizontal pass first into an 8-bit
// intermediate, then vertical; weights normalized to sum 1 in double and rounded to 22-bit
// fixed point; each pass rounds and clamps to 0..255. docs/multimodal.md, "Preprocessing".
#pragma once

#include <cstdint>
#include <vector>

#include "qbc/image/image.h"

namespace qbc::image {

/// The filters, numbered as PIL.Image.Resampling (the "resample" key of preprocessor_config).
enum class Filter : int32_t {
  kLanczos = 1,   ///< sinc(x)·sinc(x/3) on [-3, 3), support 3
  kBilinear = 2,  ///< triangle, support 1
  kBicubic = 3,   ///< Keys cubic with a = -0.5, support 2
};

/// The filter's weight at distance x (in input pixels, after the antialias stretch).
double filter_weight(Filter f, double x);

/// One axis' kernel: output pixel i reads inputs first[i] .. first[i] + count[i] - 1 with the
/// fixed-point weights weights[i * ksize + j] (scaled by 2^22).
struct AxisKernel {
  int32_t ksize = 0;
  std::vector<int32_t> first, count;
  std::vector<int32_t> weights;
};
inline constexpr int kResamplePrecisionBits = 22;

/// The kernel that maps in_size input pixels to out_size output pixels (Pillow's
/// precompute_coeffs + normalize_coeffs_8bpc, box [0, in_size)).
AxisKernel axis_kernel(int32_t in_size, int32_t out_size, Filter f);

/// `src` resized to width x height (both >= 1); a copy when the size is unchanged.
Image resize(const Image& src, int32_t width, int32_t height, Filter f);

/// The rectangle [top, top + height) x [left, left + width) of `src`, which must hold it.
Image crop(const Image& src, int32_t top, int32_t left, int32_t height, int32_t width);

}  // namespace qbc::image
