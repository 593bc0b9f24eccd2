// The rope frequency schedule (see qbc/numerics/rope_frequencies.h).
#include "qbc/numerics/rope_frequencies.h"

#include <cmath>

namespace qbc::numerics {

std::vector<double> rope_frequencies(const std::vector<double>& inv_freq,
                                     const std::vector<double>& long_inv_freq,
                                     double dynamic_factor, int64_t original_max_positions,
                                     double theta, int64_t rotary_dim, int64_t max_pos) {
  const int64_t length = max_pos + 1;
  if (!long_inv_freq.empty() && original_max_positions > 0 && length > original_max_positions) {
    return long_inv_freq;
  }
  if (dynamic_factor > 0.0 && original_max_positions > 0 && length > original_max_positions) {
    const double r = static_cast<double>(rotary_dim);
    const double base = theta * std::pow(dynamic_factor * static_cast<double>(length) /
                                                 static_cast<double>(original_max_positions) -
                                             (dynamic_factor - 1.0),
                                         r / (r - 2.0));
    std::vector<double> f(inv_freq.size());
    for (size_t i = 0; i < f.size(); ++i)
      f[i] = 1.0 / std::pow(base, static_cast<double>(2 * i) / r);
    return f;
  }
  return inv_freq;
}

}  // namespace qbc::numerics
