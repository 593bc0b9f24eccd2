// The elementwise kernels: docs/numerics.md "gated_act, add, scale, softcap" (fp32
// arithmetic, transcendental functions in fp64, one rounding to fp16 when `fp16`).
#pragma once

#include <cstdint>

namespace qbc::numerics {

/// act(gate) * up with act "silu" (gelu = false) or "gelu_tanh"; fp16 when `fp16`.
void gated_act(const float* gate, const float* up, int64_t count, bool gelu, bool fp16, float* y);
/// a + b.
void add(const float* a, const float* b, int64_t count, bool fp16, float* y);
/// x * factor.
void scale(const float* x, int64_t count, float factor, bool fp16, float* y);
/// cap * tanh(x / cap), tanh in fp64.
float softcap_value(float x, float cap);
/// softcap_value over a buffer.
void softcap(const float* x, int64_t count, float cap, bool fp16, float* y);

/// The erf GELU 0.5 · x · (1 + erf(x / √2)): erf in fp64 of fp64(x) · fp64(1/√2), rounded to
/// fp32 once, the rest in fp32 left to right; fp16 when `fp16` (docs/numerics.md "gelu").
float gelu_value(float x);
/// gelu_value (or quick_gelu_value when `quick`) over a buffer.
void gelu(const float* x, int64_t count, bool fp16, float* y, bool quick = false);
/// CLIP's quick_gelu x · σ(1.702 · x): t = fp32(1.702f · x), σ(t) in fp64 rounded to fp32 once,
/// then x · σ in fp32 (docs/numerics.md "gelu").
float quick_gelu_value(float x);
/// The tanh GELU (gated_act's "gelu_tanh", SigLIP's gelu_pytorch_tanh): inner =
/// fp32(√(2/π)) · (x + 0.044715 · x³) in fp32, tanh in fp64 rounded to fp32, 0.5 · x · (1 + tanh).
float gelu_tanh_value(float x);
/// gelu_tanh_value over a buffer; fp16 when `fp16`.
void gelu_tanh(const float* x, int64_t count, bool fp16, float* y);

}  // namespace qbc::numerics
