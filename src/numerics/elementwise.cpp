// The elementwise kernels (see qbc/numerics/elementwise.h).
// Built with -ffp-contract=off (src/numerics/CMakeLists.txt): each `a * b + c` below is two
// roundings, as the spec names them.
#include "qbc/numerics/elementwise.h"

#include <cmath>

#include "qbc/numerics/fp16.h"

namespace qbc::numerics {

void gated_act(const float* gate, const float* up, int64_t count, bool gelu, bool fp16, float* y) {
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    float a = 0.0f;
    if (gelu) {
      a = gelu_tanh_value(g);
    } else {
      const float e = static_cast<float>(std::exp(-static_cast<double>(g)));
      a = g / (1.0f + e);
    }
    y[i] = maybe_fp16(a * up[i], fp16);
  }
}

float gelu_tanh_value(float g) {
  const float k = static_cast<float>(std::sqrt(2.0 / M_PI));
  const float inner = k * (g + 0.044715f * (g * g * g));
  const float th = static_cast<float>(std::tanh(static_cast<double>(inner)));
  return 0.5f * g * (1.0f + th);
}

void gelu_tanh(const float* x, int64_t count, bool fp16, float* y) {
  for (int64_t i = 0; i < count; ++i) y[i] = maybe_fp16(gelu_tanh_value(x[i]), fp16);
}

void add(const float* a, const float* b, int64_t count, bool fp16, float* y) {
  for (int64_t i = 0; i < count; ++i) y[i] = maybe_fp16(a[i] + b[i], fp16);
}

void scale(const float* x, int64_t count, float factor, bool fp16, float* y) {
  for (int64_t i = 0; i < count; ++i) y[i] = maybe_fp16(x[i] * factor, fp16);
}

float softcap_value(float x, float cap) {
  const float th = static_cast<float>(std::tanh(static_cast<double>(x / cap)));
  return cap * th;
}

void softcap(const float* x, int64_t count, float cap, bool fp16, float* y) {
  for (int64_t i = 0; i < count; ++i) y[i] = maybe_fp16(softcap_value(x[i], cap), fp16);
}

float gelu_value(float x) {
  const double e = std::erf(static_cast<double>(x) * (1.0 / std::sqrt(2.0)));
  return 0.5f * x * (1.0f + static_cast<float>(e));
}

float quick_gelu_value(float x) {
  const float t = 1.702f * x;
  const double s = 1.0 / (1.0 + std::exp(-static_cast<double>(t)));
  return x * static_cast<float>(s);
}

void gelu(const float* x, int64_t count, bool fp16, float* y, bool quick) {
  for (int64_t i = 0; i < count; ++i)
    y[i] = maybe_fp16(quick ? quick_gelu_value(x[i]) : gelu_value(x[i]), fp16);
}

}  // namespace qbc::numerics
