// RMSNorm and LayerNorm (see qbc/numerics/norm.h).
// Built with -ffp-contract=off (src/numerics/CMakeLists.txt): each `a * b + c` below is two
// roundings, as the spec names them.
#include "qbc/numerics/norm.h"

#include <cmath>

#include "qbc/numerics/fp16.h"

namespace qbc::numerics {

void rms_norm(const float* x, int64_t s, int64_t n, const std::vector<float>& w, double eps,
              double unit_offset, int64_t group, float* y) {
  const int64_t g = group > 0 ? group : n;
  for (int64_t start = 0; start < s * n; start += g) {
    double ss = 0.0;
    for (int64_t i = 0; i < g; ++i) {
      const double v = x[start + i];
      ss += v * v;
    }
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(g) + eps);
    for (int64_t i = 0; i < g; ++i) {
      const double wi = static_cast<double>(w[static_cast<size_t>(i)]) + unit_offset;
      y[start + i] = round_fp16(static_cast<double>(x[start + i]) * r * wi);
    }
  }
}

void layer_norm(const float* x, int64_t s, int64_t n, const float* w, const float* b, double eps,
                float* y) {
  for (int64_t start = 0; start < s * n; start += n) {
    const float* xr = x + start;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(xr[i]);
    const double mean = sum / static_cast<double>(n);
    double ss = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = static_cast<double>(xr[i]) - mean;
      ss += d * d;
    }
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) {
      const double bi = b != nullptr ? static_cast<double>(b[i]) : 0.0;
      y[start + i] =
          round_fp16((static_cast<double>(xr[i]) - mean) * r * static_cast<double>(w[i]) + bi);
    }
  }
}

}  // namespace qbc::numerics
