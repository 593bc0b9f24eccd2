// Tensor kernels of the float reference runtime, one per MBLT op with
// non-trivial math (docs/ir.md is the spec). Private to src/ref. LibTorch stays
// out of headers, so at::Tensor is only forward-declared here; the callers and
// the definitions are in .cpp files that include <torch/torch.h>.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qbc/numerics/rope.h"

namespace at {
class Tensor;
}  // namespace at

namespace qbc::ref::kernels {

/// `x / sqrt(mean(x²) + eps) · (w + unit_offset)` over groups of `group` elements of the last
/// dim (0 = the whole last dim). `w` has `group` (or last-dim) elements.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps, double unit_offset,
                    int64_t group);

/// Computes cos/sin [s, rotary_dim/2] for `positions` (host values, batch 1) in the
/// dtype of `like`, already multiplied by the rope's attention_factor.
void rope_cos_sin(const numerics::Rope& table, const std::vector<int64_t>& positions,
                  const at::Tensor& like, at::Tensor* cos, at::Tensor* sin);

/// Applies HF rotate_half RoPE to `x` [b, s, heads·head_dim] with tables [s, rotary_dim/2].
at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                int64_t num_heads, int64_t head_dim, int64_t rotary_dim);

/// Causal attention of `q` [1, s, H·d] (queries at positions past .. past+s-1) over the first
/// past+s cached keys/values `k_cache`, `v_cache` [KV, T, d] (T >= past + s). With `span` the
/// call is one bidirectional span (numerics::attention's rule): row p sees
/// [max(0, min(p - window + 1, past)), past + s - 1].
at::Tensor attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                     int64_t past, int64_t num_heads, int64_t num_kv_heads, int64_t head_dim,
                     double scale, double softcap, int64_t window, bool span = false);

/// `act(gate) · up` for act "silu" or "gelu_tanh" (callers validate the name).
at::Tensor gated_act(const at::Tensor& gate, const at::Tensor& up, const std::string& act);

/// `cap · tanh(x / cap)`.
at::Tensor softcap(const at::Tensor& x, double cap);

/// Erf GELU, `0.5·x·(1 + erf(x / √2))` (PyTorch's nn.GELU()).
at::Tensor gelu(const at::Tensor& x);
/// CLIP's quick_gelu: x · sigmoid(1.702 · x) (transformers' QuickGELUActivation).
at::Tensor quick_gelu(const at::Tensor& x);
/// The tanh GELU (transformers' gelu_pytorch_tanh: at::gelu with approximate "tanh").
at::Tensor gelu_tanh(const at::Tensor& x);
/// [b, gh·gw, c] rows of a row-major grid grid_w wide -> [b, (gh/k)·(gw/k), c]: the mean of each
/// k x k window (at::avg_pool2d over the grid, as Gemma 3's projector pools).
at::Tensor avg_pool(const at::Tensor& x, int64_t grid_w, int64_t k);

/// Attention of `q`, `k`, `v` [1, s, H·d] without causality or cache: scores `q·k · scale`,
/// softmax over the keys of the query's segment (`segments`: consecutive run lengths summing to
/// s; empty = one run of s), weighted sum of `v`.
at::Tensor full_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          int64_t num_heads, int64_t head_dim, double scale,
                          const std::vector<int64_t>& segments);

}  // namespace qbc::ref::kernels
