// RoPE (see qbc/numerics/rope.h).
// Built with -ffp-contract=off (src/numerics/CMakeLists.txt): each `a * b + c` below is two
// roundings, as the spec names them.
#include "qbc/numerics/rope.h"

#include <cmath>

#include "qbc/numerics/fp16.h"
#include "qbc/numerics/rope_frequencies.h"

namespace qbc::numerics {

std::vector<double> Rope::frequencies(int64_t max_pos) const {
  return rope_frequencies(inv_freq, long_inv_freq, dynamic_factor, original_max_positions, theta,
                          rotary_dim, max_pos);
}

void rope(const float* x, int64_t s, int64_t first_pos, const Rope& p, float* y, int64_t freq_pos) {
  const std::vector<double> f = p.frequencies(freq_pos >= 0 ? freq_pos : first_pos + s - 1);
  const int64_t half = p.rotary_dim / 2;
  const int64_t width = p.heads * p.head_dim;
  std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
  for (int64_t t = 0; t < s; ++t) {
    const double pos = static_cast<double>(first_pos + t);
    for (int64_t i = 0; i < half; ++i) {  // the NPU's fp16 table, computed in fp64
      const double a = pos * f[static_cast<size_t>(i)];
      cs[static_cast<size_t>(i)] = round_fp16(std::cos(a) * p.attention_factor);
      sn[static_cast<size_t>(i)] = round_fp16(std::sin(a) * p.attention_factor);
    }
    for (int64_t h = 0; h < p.heads; ++h) {
      const float* xr = x + t * width + h * p.head_dim;
      float* yr = y + t * width + h * p.head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float c = cs[static_cast<size_t>(i)], sv = sn[static_cast<size_t>(i)];
        const float x1 = xr[i], x2 = xr[i + half];
        yr[i] = round_fp16(x1 * c - x2 * sv);
        yr[i + half] = round_fp16(x2 * c + x1 * sv);
      }
      for (int64_t i = p.rotary_dim; i < p.head_dim; ++i) yr[i] = xr[i];
    }
  }
}

void rope_table(const float* x, const float* cos, const float* sin, int64_t s, int64_t heads,
                int64_t head_dim, float* y) {
  const int64_t half = head_dim / 2, width = heads * head_dim;
  for (int64_t t = 0; t < s; ++t) {
    const float* cs = cos + t * half;
    const float* sn = sin + t * half;
    for (int64_t h = 0; h < heads; ++h) {
      const float* xr = x + t * width + h * head_dim;
      float* yr = y + t * width + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = xr[i], x2 = xr[i + half];
        yr[i] = round_fp16(x1 * cs[i] - x2 * sn[i]);
        yr[i + half] = round_fp16(x2 * cs[i] + x1 * sn[i]);
      }
    }
  }
}

}  // namespace qbc::numerics
