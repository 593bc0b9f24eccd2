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
#include "naive_siglip.h"

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
  const int64_t g = d.image / d.patch, n = g * g, h = d.hidden;
  const NaiveSiglipTower tower = naive_siglip_tower(d);
  Mat x = naive_siglip_embeddings(tower, m, w, chw);
  for (int64_t l = 0; l < d.depth; ++l) {
    const std::string p = m + "encoder.layers." + std::to_string(l) + ".";
    naive_siglip_layer(tower, p, w, n, x);
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
