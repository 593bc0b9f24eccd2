// The avg_pool kernel (see qbc/numerics/pool.h).
#include "qbc/numerics/pool.h"

#include <algorithm>
#include <vector>

#include "qbc/numerics/fp16.h"

namespace qbc::numerics {

void avg_pool(const float* x, int64_t gh, int64_t gw, int64_t c, int64_t k, bool fp16, float* y) {
  const int64_t oh = gh / k, ow = gw / k;
  const double area = static_cast<double>(k * k);
  std::vector<double> sum(static_cast<size_t>(c));
  for (int64_t oy = 0; oy < oh; ++oy) {
    for (int64_t ox = 0; ox < ow; ++ox) {
      std::fill(sum.begin(), sum.end(), 0.0);
      for (int64_t dy = 0; dy < k; ++dy) {
        for (int64_t dx = 0; dx < k; ++dx) {
          const float* row = x + ((oy * k + dy) * gw + ox * k + dx) * c;
          for (int64_t i = 0; i < c; ++i) sum[static_cast<size_t>(i)] += row[i];
        }
      }
      float* out = y + (oy * ow + ox) * c;
      for (int64_t i = 0; i < c; ++i)
        out[i] = maybe_fp16(static_cast<float>(sum[static_cast<size_t>(i)] / area), fp16);
    }
  }
}

}  // namespace qbc::numerics
