// The linear kernels: docs/numerics.md "linear (quantized)" (integer codes, exact integer
// accumulators, per-channel or group-wise requantization, zero points, static or per-token
// input scales) and the float linear of unquantized graphs. Each kernel is a literal
// transcription of its rule; values are rows of floats ([s, n] row-major, batch 1) holding
// fp16 values unless the caller asks for fp32.
#pragma once

#include <cstdint>
#include <vector>

namespace qbc::numerics {

/// A qlinear node's constants.
struct QLinear {
  int64_t out = 0, in = 0;
  std::vector<int32_t> wq;     ///< [out, in] integer codes.
  std::vector<float> wscale;   ///< [out], or [out, groups] when group > 0
  std::vector<int32_t> wzero;  ///< Zero point per scale, or empty (symmetric).
  /// Float offset per scale (a GGUF Q4_1 / Q5_1 block's minimum), or empty: with group > 0
  /// only; ŵ = s·(q − z) + m (docs/numerics.md "linear (quantized)").
  std::vector<float> wmin;
  std::vector<float> bias;  ///< [out] or empty.
  float in_scale = 1.0f;    ///< fp32, as the spec stores scales (static scaling).
  int in_bits = 8;
  bool in_dynamic = false;  ///< per-token scale max|x[t, :]| / qmax instead of in_scale.
  bool in_asym = false;     ///< asymmetric input codes (a zero point per token, or in_zero).
  int32_t in_zero = 0;      ///< the static input zero point (in_asym, not in_dynamic).
  int64_t group = 0;        ///< > 0: wscale is [out, ceil(in / group)], one scale per group.
  bool out_fp16 = true;
};

/// y[s, out] = quantized linear of x[s, in] (docs/numerics.md "linear (quantized)").
void qlinear(const float* x, int64_t s, const QLinear& p, float* y);

/// Float linear: fp32 products accumulated in index order, + bias, fp16 when `fp16`.
void linear(const float* x, int64_t s, const std::vector<float>& w, const std::vector<float>& bias,
            int64_t out, int64_t in, bool fp16, float* y);

}  // namespace qbc::numerics
