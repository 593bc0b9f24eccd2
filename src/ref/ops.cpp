// Tensor kernels of the float reference runtime (see ops.h and docs/ir.md).
#include "ops.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "qbc/numerics/rope.h"

namespace qbc::ref::kernels {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps, double unit_offset,
                    int64_t group) {
  const int64_t n = x.size(-1);
  const int64_t g = group > 0 ? group : n;
  std::vector<int64_t> grouped(x.sizes().begin(), x.sizes().end() - 1);
  grouped.push_back(n / g);
  grouped.push_back(g);
  const at::Tensor xg = x.reshape(grouped);
  const at::Tensor inv = at::rsqrt(xg.pow(2).mean(-1, /*keepdim=*/true) + eps);
  const at::Tensor scale = unit_offset != 0.0 ? w + unit_offset : w;
  return (xg * inv * scale).reshape(x.sizes());
}

void rope_cos_sin(const numerics::Rope& table, const std::vector<int64_t>& positions,
                  const at::Tensor& like, at::Tensor* cos, at::Tensor* sin) {
  int64_t max_pos = 0;
  for (int64_t p : positions) max_pos = std::max(max_pos, p);
  const std::vector<double> f = table.frequencies(max_pos);
  const int64_t s = static_cast<int64_t>(positions.size());
  const int64_t half = static_cast<int64_t>(f.size());
  // Angles in float64 on the host: exact enough that float32 results do not depend on how
  // the angle was rounded.
  at::Tensor c = at::empty({s, half}, at::kDouble);
  at::Tensor sn = at::empty({s, half}, at::kDouble);
  double* cp = c.data_ptr<double>();
  double* sp = sn.data_ptr<double>();
  for (int64_t i = 0; i < s; ++i) {
    const double p = static_cast<double>(positions[static_cast<size_t>(i)]);
    for (int64_t k = 0; k < half; ++k) {
      const double a = p * f[static_cast<size_t>(k)];
      cp[i * half + k] = std::cos(a) * table.attention_factor;
      sp[i * half + k] = std::sin(a) * table.attention_factor;
    }
  }
  *cos = c.to(like.scalar_type());
  *sin = sn.to(like.scalar_type());
}

at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                int64_t num_heads, int64_t head_dim, int64_t rotary_dim) {
  const int64_t b = x.size(0);
  const int64_t s = x.size(1);
  const int64_t half = rotary_dim / 2;
  const at::Tensor xh = x.view({b, s, num_heads, head_dim});
  const at::Tensor c = cos.view({1, s, 1, half});
  const at::Tensor sn = sin.view({1, s, 1, half});
  const at::Tensor x1 = xh.narrow(-1, 0, half);
  const at::Tensor x2 = xh.narrow(-1, half, half);
  std::vector<at::Tensor> parts = {x1 * c - x2 * sn, x2 * c + x1 * sn};
  if (rotary_dim < head_dim) parts.push_back(xh.narrow(-1, rotary_dim, head_dim - rotary_dim));
  return at::cat(parts, -1).view({b, s, num_heads * head_dim});
}

at::Tensor attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                     int64_t past, int64_t num_heads, int64_t num_kv_heads, int64_t head_dim,
                     double scale, double softcap, int64_t window, bool span) {
  const int64_t s = q.size(1);
  const int64_t total = past + s;
  const int64_t groups = num_heads / num_kv_heads;
  // Query head h = kv * groups + g reads KV head kv: [KV, G, s, d] against [KV, 1, T, d].
  const at::Tensor qh = q.view({s, num_kv_heads, groups, head_dim}).permute({1, 2, 0, 3});
  const at::Tensor k = k_cache.narrow(1, 0, total).unsqueeze(1);
  const at::Tensor v = v_cache.narrow(1, 0, total).unsqueeze(1);
  at::Tensor scores = at::matmul(qh, k.transpose(-1, -2)) * scale;  // [KV, G, s, T]
  if (softcap > 0.0) scores = at::tanh(scores / softcap) * softcap;
  const bool causal_needed = s > 1 && !span;
  const bool window_needed = window > 0 && total > window;
  if (causal_needed || window_needed) {
    const at::Tensor j = at::arange(total, at::kLong).view({1, total});
    const at::Tensor p = at::arange(past, total, at::kLong).view({s, 1});
    at::Tensor blocked = span ? at::zeros({s, total}, at::kBool) : j > p;
    // A span's rows reach back at least to its first position (HF's or-mask).
    if (window > 0)
      blocked = blocked.logical_or(span ? j < at::minimum(p - window + 1, at::full_like(p, past))
                                        : p - j >= window);
    scores = scores.masked_fill(blocked, -std::numeric_limits<double>::infinity());
  }
  const at::Tensor probs = at::softmax(scores, -1);
  const at::Tensor out = at::matmul(probs, v);  // [KV, G, s, d]
  return out.permute({2, 0, 1, 3}).reshape({1, s, num_heads * head_dim});
}

at::Tensor gated_act(const at::Tensor& gate, const at::Tensor& up, const std::string& act) {
  if (act == "silu") return at::silu(gate) * up;
  return at::gelu(gate, "tanh") * up;
}

at::Tensor softcap(const at::Tensor& x, double cap) { return at::tanh(x / cap) * cap; }

at::Tensor gelu(const at::Tensor& x) { return at::gelu(x, "none"); }

at::Tensor quick_gelu(const at::Tensor& x) { return x * at::sigmoid(x * 1.702); }

at::Tensor gelu_tanh(const at::Tensor& x) { return at::gelu(x, "tanh"); }

at::Tensor avg_pool(const at::Tensor& x, int64_t grid_w, int64_t k) {
  const int64_t b = x.size(0), c = x.size(2), gh = x.size(1) / grid_w;
  const at::Tensor grid = x.reshape({b, gh, grid_w, c}).permute({0, 3, 1, 2});
  const at::Tensor pooled = at::avg_pool2d(grid, {k, k}, {k, k});
  return pooled.flatten(2).transpose(1, 2).contiguous();
}

at::Tensor full_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          int64_t num_heads, int64_t head_dim, double scale,
                          const std::vector<int64_t>& segments) {
  const int64_t s = q.size(1);
  auto heads = [&](const at::Tensor& t) {
    return t.view({s, num_heads, head_dim}).transpose(0, 1);
  };
  at::Tensor scores = at::matmul(heads(q), heads(k).transpose(-1, -2)) * scale;  // [H, s, s]
  if (segments.size() > 1) {
    std::vector<int64_t> id;
    id.reserve(static_cast<size_t>(s));
    for (size_t r = 0; r < segments.size(); ++r) id.insert(id.end(), segments[r], int64_t(r));
    const at::Tensor seg = torch::tensor(id, at::kLong);
    const at::Tensor blocked = seg.view({s, 1}) != seg.view({1, s});
    scores = scores.masked_fill(blocked, -std::numeric_limits<double>::infinity());
  }
  const at::Tensor out = at::matmul(at::softmax(scores, -1), heads(v));  // [H, s, d]
  return out.transpose(0, 1).reshape({1, s, num_heads * head_dim});
}

}  // namespace qbc::ref::kernels
