// RMSNorm (see qbc/numerics/norm.h).
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

}  // namespace qbc::numerics
