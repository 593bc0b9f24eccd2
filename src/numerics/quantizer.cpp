// The quantizers (see qbc/numerics/quantizer.h).
#include "qbc/numerics/quantizer.h"

#include <algorithm>
#include <cmath>

namespace qbc::numerics {

int64_t quant_max(int bits) { return (int64_t{1} << (bits - 1)) - 1; }

int32_t quantize_symmetric(double x, float scale, int bits, float offset) {
  const double q = std::nearbyint((x - static_cast<double>(offset)) / static_cast<double>(scale));
  const double hi = static_cast<double>(quant_max(bits));
  if (std::isnan(q)) return 0;
  return static_cast<int32_t>(std::min(std::max(q, -hi - 1.0), hi));
}

AffineParams affine_params(double span, double neg_lo, int bits) {
  const double levels = static_cast<double>((int64_t{1} << bits) - 1);
  AffineParams a;
  a.scale = std::max(static_cast<float>(span / levels), 1e-8f);
  const double zu =
      std::min(std::max(std::nearbyint(neg_lo / static_cast<double>(a.scale)), 0.0), levels);
  a.zero = static_cast<int32_t>(zu) - static_cast<int32_t>(quant_max(bits) + 1);
  return a;
}

float per_token_scale(const float* x, int64_t n, int bits) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return std::max(static_cast<float>(static_cast<double>(m) / static_cast<double>(quant_max(bits))),
                  kMinScale);
}

void per_token_affine(const float* x, int64_t n, int bits, float* scale, int32_t* zero) {
  float lo = 0.0f, hi = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const AffineParams a = affine_params(static_cast<double>(hi) - static_cast<double>(lo),
                                       -static_cast<double>(lo), bits);
  *scale = a.scale;
  *zero = a.zero;
}

int32_t quantize_affine(double x, float scale, int32_t zero, int bits) {
  const double q = std::nearbyint(x / static_cast<double>(scale)) + zero;
  const double hi = static_cast<double>(quant_max(bits));
  if (std::isnan(q)) return zero;
  return static_cast<int32_t>(std::min(std::max(q, -hi - 1.0), hi));
}

}  // namespace qbc::numerics
