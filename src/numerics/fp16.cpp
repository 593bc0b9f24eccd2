// fp16 rounding (see qbc/numerics/fp16.h).
#include "qbc/numerics/fp16.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace qbc::numerics {

float round_fp16(double x) {
  if (std::isnan(x) || x == 0.0) return static_cast<float>(x);
  const double a = std::fabs(x);
  // 65520 is halfway between the largest fp16 (65504) and 2^16; its tie goes to infinity.
  if (a >= 65520.0)
    return std::copysign(std::numeric_limits<float>::infinity(), static_cast<float>(x));
  int e = 0;
  std::frexp(a, &e);                      // a = m * 2^e, m in [0.5, 1)
  const int lead = std::max(e - 1, -14);  // exponent of the leading bit; subnormals below 2^-14
  const double quantum = std::ldexp(1.0, lead - 10);
  // x / quantum is exact (power of two); nearbyint rounds half to even.
  return static_cast<float>(std::nearbyint(x / quantum) * quantum);
}

float maybe_fp16(float v, bool fp16) { return fp16 ? round_fp16(v) : v; }

}  // namespace qbc::numerics
