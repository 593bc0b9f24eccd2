// A float64 SigLIP tower written from HF's modeling_siglip.py (and the Gemma 3, Idefics3 and
// LLaVA towers, which are SigLIP's): SiglipVisionEmbeddings (Conv2d patch embedding with bias,
// "valid" padding, stride = patch, flatten(2).transpose(1, 2), + position_embedding(arange(N)))
// and SiglipEncoderLayer (layer_norm1, q/k/v, softmax(q·kᵀ·head_dim^-0.5) over every patch,
// out_proj, residual, layer_norm2, fc1, gelu_pytorch_tanh, fc2, residual). Plain loops in
// double, the convolution on the CHW image; shared by the families' naive references so each
// writes only what differs (pooling, pixel shuffle, projector).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "naive_llava_clip.h"

namespace qbc::ref::testing {

/// The shapes of a naive SigLIP tower.
struct NaiveSiglipTower {
  int64_t hidden = 0, heads = 0, ffn = 0;
  int64_t patch = 14, image = 384;  ///< the grid is image / patch whole patches
  double eps = 1e-6;
  bool tanh_gelu = true;  ///< gelu_pytorch_tanh; false: the erf GELU (to tell them apart)
};

/// The tower shapes of a family's dims (Gemma 3's, Idefics3's, LLaVA-SigLIP's: the same fields).
template <typename Dims>
NaiveSiglipTower naive_siglip_tower(const Dims& d) {
  NaiveSiglipTower t;
  t.hidden = d.hidden;
  t.heads = d.heads;
  t.ffn = d.ffn;
  t.patch = d.patch;
  t.image = d.image;
  t.eps = d.eps;
  t.tanh_gelu = d.tanh_gelu;
  return t;
}

using NaiveWeights = std::function<std::vector<float>(const std::string&)>;

/// SiglipVisionEmbeddings of `chw` [3, image, image] under prefix `m` ("...vision_model."):
/// [N, hidden], N = (image / patch)², the pixels past the last whole patch unread.
inline std::vector<double> naive_siglip_embeddings(const NaiveSiglipTower& d, const std::string& m,
                                                   const NaiveWeights& w,
                                                   const std::vector<float>& chw) {
  const int64_t g = d.image / d.patch, h = d.hidden;
  const std::vector<float> conv = w(m + "embeddings.patch_embedding.weight");
  const std::vector<float> conv_b = w(m + "embeddings.patch_embedding.bias");
  const std::vector<float> pos = w(m + "embeddings.position_embedding.weight");
  std::vector<double> x(static_cast<size_t>(g * g * h));
  for (int64_t oy = 0; oy < g; ++oy) {
    for (int64_t ox = 0; ox < g; ++ox) {
      for (int64_t o = 0; o < h; ++o) {
        double acc = conv_b[static_cast<size_t>(o)];
        for (int64_t c = 0; c < 3; ++c)
          for (int64_t ky = 0; ky < d.patch; ++ky)
            for (int64_t kx = 0; kx < d.patch; ++kx)
              acc += static_cast<double>(
                         conv[static_cast<size_t>(((o * 3 + c) * d.patch + ky) * d.patch + kx)]) *
                     chw[static_cast<size_t>((c * d.image + oy * d.patch + ky) * d.image +
                                             ox * d.patch + kx)];
        x[static_cast<size_t>((oy * g + ox) * h + o)] =
            acc + pos[static_cast<size_t>((oy * g + ox) * h + o)];
      }
    }
  }
  return x;
}

/// One SiglipEncoderLayer with weights under `p` ("...encoder.layers.L.") on `x` [n, hidden], in
/// place; no attention mask (every patch attends to every patch).
inline void naive_siglip_layer(const NaiveSiglipTower& d, const std::string& p,
                               const NaiveWeights& w, int64_t n, std::vector<double>& x) {
  using naive_clip_internal::layer_norm;
  using naive_clip_internal::linear;
  using Mat = std::vector<double>;
  const int64_t h = d.hidden, hd = h / d.heads;
  auto lin = [&](const Mat& in, int64_t in_w, const std::string& name, int64_t out) {
    return linear(in, n, in_w, w(p + name + ".weight"), w(p + name + ".bias"), out);
  };
  Mat a = layer_norm(x, n, h, w(p + "layer_norm1.weight"), w(p + "layer_norm1.bias"), d.eps);
  Mat q = lin(a, h, "self_attn.q_proj", h), k = lin(a, h, "self_attn.k_proj", h),
      v = lin(a, h, "self_attn.v_proj", h);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  Mat ctx(static_cast<size_t>(n * h), 0.0);
  std::vector<double> s(static_cast<size_t>(n));
  for (int64_t head = 0; head < d.heads; ++head) {
    for (int64_t i = 0; i < n; ++i) {
      double mx = -1e300;
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0.0;
        for (int64_t c = 0; c < hd; ++c)
          dot += q[static_cast<size_t>(i * h + head * hd + c)] *
                 k[static_cast<size_t>(j * h + head * hd + c)];
        s[static_cast<size_t>(j)] = dot * scale;
        mx = std::max(mx, s[static_cast<size_t>(j)]);
      }
      double sum = 0.0;
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (int64_t j = 0; j < n; ++j)
        for (int64_t c = 0; c < hd; ++c)
          ctx[static_cast<size_t>(i * h + head * hd + c)] +=
              s[static_cast<size_t>(j)] / sum * v[static_cast<size_t>(j * h + head * hd + c)];
    }
  }
  Mat o = lin(ctx, h, "self_attn.out_proj", h);
  for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
  a = layer_norm(x, n, h, w(p + "layer_norm2.weight"), w(p + "layer_norm2.bias"), d.eps);
  Mat f = lin(a, h, "mlp.fc1", d.ffn);
  const double c0 = std::sqrt(2.0 / M_PI);
  for (double& e : f) {
    e = d.tanh_gelu ? 0.5 * e * (1.0 + std::tanh(c0 * (e + 0.044715 * e * e * e)))
                    : 0.5 * e * (1.0 + std::erf(e / std::sqrt(2.0)));
  }
  Mat f2 = lin(f, d.ffn, "mlp.fc2", h);
  for (size_t i = 0; i < x.size(); ++i) x[i] += f2[i];
}

}  // namespace qbc::ref::testing
