// A naive Gemma 3 image-feature forward pass (SigLIP vision tower + Gemma3MultiModalProjector),
// for cross-checking the Gemma 3 vision MBLT graph.
//
// Written from transformers' modeling_siglip.py (SiglipVisionEmbeddings: Conv2d patch embedding
// with bias over the pixel image, "valid" padding, flatten(2).transpose(1, 2), no class token,
// position_embedding(arange) added; SiglipEncoderLayer: layer_norm1, SiglipAttention with q·k^T
// scaled by head_dim^-0.5, biased q/k/v/out_proj, residual, layer_norm2, SiglipMLP fc1,
// gelu_pytorch_tanh, fc2, residual; SiglipVisionTransformer: post_layernorm, last_hidden_state)
// and modeling_gemma3.py (Gemma3MultiModalProjector: transpose(1, 2), reshape to the
// patches_per_image² grid, AvgPool2d(kernel = stride = patches_per_image / √mm_tokens_per_image),
// flatten(2).transpose(1, 2), Gemma3RMSNorm x·rsqrt(mean(x²) + eps)·(1 + w), then
// matmul with mm_input_projection_weight [vision width, text width]), not from qbc's graph
// builder or its host helpers: double precision, plain loops, the convolution on the CHW image.
// The linear and LayerNorm loops are the LLaVA reference's (naive_llava_clip.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "naive_llava_clip.h"

namespace qbc::ref::testing {

struct NaiveGemma3VisionDims {
  int64_t depth = 0, hidden = 0, heads = 0, ffn = 0, text_hidden = 0;
  int64_t patch = 14, image = 896, tokens_per_image = 256;
  double eps = 1e-6;        ///< SiglipVisionConfig.layer_norm_eps (also the projector's norm)
  bool tanh_gelu = true;    ///< gelu_pytorch_tanh; false: erf GELU (to tell them apart)
  std::string prefix = "";  ///< "" or "model." (transformers >= 4.52)
};

/// image_features [tokens_per_image, text_hidden] of one CHW image [3, image, image].
inline std::vector<double> naive_gemma3_image_features(
    const NaiveGemma3VisionDims& d, const std::function<std::vector<float>(const std::string&)>& w,
    const std::vector<float>& chw) {
  using naive_clip_internal::layer_norm;
  using naive_clip_internal::linear;
  using Mat = std::vector<double>;
  const std::string m = d.prefix + "vision_tower.vision_model.";
  const int64_t g = d.image / d.patch, n = g * g, h = d.hidden, hd = h / d.heads;
  const std::vector<float> conv = w(m + "embeddings.patch_embedding.weight");
  const std::vector<float> conv_b = w(m + "embeddings.patch_embedding.bias");
  const std::vector<float> pos = w(m + "embeddings.position_embedding.weight");
  Mat x(static_cast<size_t>(n * h));
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
  for (int64_t l = 0; l < d.depth; ++l) {
    const std::string p = m + "encoder.layers." + std::to_string(l) + ".";
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
        for (int64_t j = 0; j < n; ++j) {  // no mask
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
  x = layer_norm(x, n, h, w(m + "post_layernorm.weight"), w(m + "post_layernorm.bias"), d.eps);
  // Gemma3MultiModalProjector.
  const auto per_side = static_cast<int64_t>(std::sqrt(static_cast<double>(d.tokens_per_image)));
  const int64_t kern = g / per_side, t = per_side * per_side;
  Mat pooled(static_cast<size_t>(t * h), 0.0);
  for (int64_t py = 0; py < per_side; ++py)
    for (int64_t px = 0; px < per_side; ++px)
      for (int64_t c = 0; c < h; ++c) {
        double acc = 0.0;
        for (int64_t ky = 0; ky < kern; ++ky)
          for (int64_t kx = 0; kx < kern; ++kx)
            acc += x[static_cast<size_t>(((py * kern + ky) * g + px * kern + kx) * h + c)];
        pooled[static_cast<size_t>((py * per_side + px) * h + c)] =
            acc / static_cast<double>(kern * kern);
      }
  const std::string pj = d.prefix + "multi_modal_projector.";
  const std::vector<float> nw = w(pj + "mm_soft_emb_norm.weight");
  for (int64_t r = 0; r < t; ++r) {
    double ms = 0.0;
    for (int64_t c = 0; c < h; ++c)
      ms += pooled[static_cast<size_t>(r * h + c)] * pooled[static_cast<size_t>(r * h + c)];
    const double inv = 1.0 / std::sqrt(ms / static_cast<double>(h) + d.eps);
    for (int64_t c = 0; c < h; ++c)
      pooled[static_cast<size_t>(r * h + c)] *= inv * (1.0 + nw[static_cast<size_t>(c)]);
  }
  const std::vector<float> proj = w(pj + "mm_input_projection_weight");  // [h, text_hidden]
  Mat y(static_cast<size_t>(t * d.text_hidden), 0.0);
  for (int64_t r = 0; r < t; ++r)
    for (int64_t o = 0; o < d.text_hidden; ++o) {
      double acc = 0.0;
      for (int64_t c = 0; c < h; ++c)
        acc += pooled[static_cast<size_t>(r * h + c)] *
               proj[static_cast<size_t>(c * d.text_hidden + o)];
      y[static_cast<size_t>(r * d.text_hidden + o)] = acc;
    }
  return y;
}

}  // namespace qbc::ref::testing
