// The linear kernels (see qbc/numerics/linear.h).
// Built with -ffp-contract=off (src/numerics/CMakeLists.txt): each `a * b + c` below is two
// roundings, as the spec names them.
// Integer matmuls accumulate in int64: 8-bit codes would fit int32, but 16-bit inputs
// (qlinear in_bits 16, u16 P against int16 V) could overflow it, and int64 is exact for
// every case, so the result equals the NPU's exact accumulator.
#include "qbc/numerics/linear.h"

#include <algorithm>

#include "qbc/numerics/fp16.h"
#include "qbc/numerics/quantizer.h"

namespace qbc::numerics {

void qlinear(const float* x, int64_t s, const QLinear& p, float* y) {
  std::vector<int32_t> qx(static_cast<size_t>(p.in));
  for (int64_t t = 0; t < s; ++t) {
    const float* xr = x + t * p.in;
    float in_scale = p.in_scale;
    int32_t in_zero = p.in_zero;
    if (p.in_dynamic && p.in_asym) {
      per_token_affine(xr, p.in, p.in_bits, &in_scale, &in_zero);
    } else if (p.in_dynamic) {
      in_scale = per_token_scale(xr, p.in, p.in_bits);
    }
    for (int64_t i = 0; i < p.in; ++i) {
      // The code minus its zero point: x ≈ s_x · qx.
      qx[static_cast<size_t>(i)] =
          p.in_asym ? quantize_affine(xr[i], in_scale, in_zero, p.in_bits) - in_zero
                    : quantize_symmetric(xr[i], in_scale, p.in_bits);
    }
    const int64_t group = p.group > 0 ? p.group : p.in;
    const int64_t groups = (p.in + group - 1) / group;
    for (int64_t c = 0; c < p.out; ++c) {
      const int32_t* w = p.wq.data() + c * p.in;
      // Per group: an exact integer partial sum Σ (q_x − z_x)(q_w − z_w), requantized in
      // fp32 (with a float offset m, plus the group's input sum times s_x·m) and accumulated
      // in fp32 in group order (one group: the per-channel rule).
      float v = 0.0f;
      for (int64_t gi = 0; gi < groups; ++gi) {
        const int64_t zw = p.wzero.empty() ? 0 : p.wzero[static_cast<size_t>(c * groups + gi)];
        int64_t acc = 0;
        const int64_t end = std::min(p.in, (gi + 1) * group);
        for (int64_t i = gi * group; i < end; ++i)
          acc += int64_t{qx[static_cast<size_t>(i)]} * (w[i] - zw);
        const float m =
            in_scale * p.wscale[static_cast<size_t>(c * groups + gi)];  // fp32(s_x * s_w[c, g])
        float part = static_cast<float>(acc) * m;
        if (!p.wmin.empty()) {  // + fp32(Σ (q_x − z_x)) · fp32(s_x · m[c, g])
          int64_t xsum = 0;
          for (int64_t i = gi * group; i < end; ++i) xsum += qx[static_cast<size_t>(i)];
          const float mm = in_scale * p.wmin[static_cast<size_t>(c * groups + gi)];
          part = part + static_cast<float>(xsum) * mm;
        }
        v = gi == 0 ? part : v + part;
      }
      if (!p.bias.empty()) v = v + p.bias[static_cast<size_t>(c)];
      y[t * p.out + c] = maybe_fp16(v, p.out_fp16);
    }
  }
}

void linear(const float* x, int64_t s, const std::vector<float>& w, const std::vector<float>& bias,
            int64_t out, int64_t in, bool fp16, float* y) {
  for (int64_t t = 0; t < s; ++t) {
    const float* xr = x + t * in;
    for (int64_t c = 0; c < out; ++c) {
      const float* wr = w.data() + c * in;
      float acc = 0.0f;
      for (int64_t i = 0; i < in; ++i) acc += xr[i] * wr[i];
      if (!bias.empty()) acc = acc + bias[static_cast<size_t>(c)];
      y[t * out + c] = maybe_fp16(acc, fp16);
    }
  }
}

}  // namespace qbc::numerics
