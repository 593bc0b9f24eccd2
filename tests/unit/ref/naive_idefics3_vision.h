// A naive Idefics3 / SmolVLM image-feature forward pass of one tile (Idefics3VisionTransformer +
// Idefics3Connector), for cross-checking the Idefics3 vision MBLT graph.
//
// Written from transformers' modeling_idefics3.py (modeling_smolvlm.py is the same for these
// parts): Idefics3VisionEmbeddings (Conv2d patch embedding with bias over the pixel image, "valid"
// padding, stride = patch, flatten(2).transpose(1, 2), + position_embedding(position_ids), where
// the bucketized position ids of a whole tile without a patch mask are 0..N-1 row-major);
// Idefics3EncoderLayer (layer_norm1, attention with biased q/k/v/out_proj and softmax(q·k^T ·
// head_dim^-0.5) over every patch, residual, layer_norm2, fc1, gelu_pytorch_tanh, fc2, residual);
// post_layernorm; Idefics3Connector.pixel_shuffle (its view / permute / reshape steps carried out
// one by one on contiguous copies, as torch does) and modality_projection.proj (a linear without
// bias). Not from qbc's graph builder or its host helpers (shuffle_group_rows,
// idefics3_patch_rows): double precision, plain loops, the convolution on the CHW image. The
// linear and LayerNorm loops are the LLaVA reference's (naive_llava_clip.h). Header-only because
// tests/unit/ref builds one binary per *_test.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "naive_llava_clip.h"
#include "naive_siglip.h"

namespace qbc::ref::testing {

struct NaiveIdefics3VisionDims {
  int64_t depth = 0, hidden = 0, heads = 0, ffn = 0, text_hidden = 0;
  int64_t patch = 16, image = 512;  ///< the tile: vision_config.patch_size and image_size
  int64_t scale = 4;                ///< Idefics3Config.scale_factor
  double eps = 1e-6;                ///< vision_config.layer_norm_eps
  bool tanh_gelu = true;            ///< gelu_pytorch_tanh; false: erf GELU (to tell them apart)
  std::string prefix = "model.";    ///< Idefics3Model / SmolVLMModel sit under `model.`
};

namespace naive_idefics3_internal {

/// x.permute(0, 2, 1, 3) of a contiguous [1, d0, d1, d2] tensor (the batch dim dropped) made
/// contiguous, as the reshape that follows it in pixel_shuffle copies it: [d1, d0, d2].
inline std::vector<double> swap_leading(const std::vector<double>& x, int64_t d0, int64_t d1,
                                        int64_t d2) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < d0; ++i)
    for (int64_t j = 0; j < d1; ++j)
      for (int64_t k = 0; k < d2; ++k)
        y[static_cast<size_t>((j * d0 + i) * d2 + k)] =
            x[static_cast<size_t>((i * d1 + j) * d2 + k)];
  return y;
}

}  // namespace naive_idefics3_internal

/// Idefics3Connector.pixel_shuffle of `x` [seq, dim] (batch 1, row-major) by `s`:
/// [seq / s², dim · s²]. A view or a reshape of a contiguous tensor keeps its values in place
/// (only the shape changes); each permute is made contiguous by the reshape after it.
inline std::vector<double> naive_idefics3_pixel_shuffle(const std::vector<double>& x, int64_t seq,
                                                        int64_t dim, int64_t s) {
  const auto height = static_cast<int64_t>(std::sqrt(static_cast<double>(seq)));  // int(seq**0.5)
  const int64_t width = height;
  // x.view(bsz, height, width, embed_dim), then x.view(bsz, height, width / s, embed_dim · s):
  // the same values.
  // x.permute(0, 2, 1, 3): [width / s, height, embed_dim · s]; the reshape to
  // [width / s, height / s, embed_dim · s²] reads it in that (contiguous) order.
  std::vector<double> t = naive_idefics3_internal::swap_leading(x, height, width / s, dim * s);
  // x.permute(0, 2, 1, 3): [height / s, width / s, embed_dim · s²]; the reshape to
  // [seq / s², embed_dim · s²] reads it in that order.
  t = naive_idefics3_internal::swap_leading(t, width / s, height / s, dim * s * s);
  return t;
}

/// image_features [N / scale², text_hidden] of one CHW tile [3, image, image], N = (image /
/// patch)². `w(name)` reads a checkpoint tensor as float32 under its HF name.
inline std::vector<double> naive_idefics3_image_features(
    const NaiveIdefics3VisionDims& d,
    const std::function<std::vector<float>(const std::string&)>& w, const std::vector<float>& chw) {
  using naive_clip_internal::layer_norm;
  using naive_clip_internal::linear;
  using Mat = std::vector<double>;
  const std::string m = d.prefix + "vision_model.";
  const int64_t g = d.image / d.patch, n = g * g, h = d.hidden;
  // Idefics3VisionEmbeddings: patch_embedding(pixel_values).flatten(2).transpose(1, 2), then
  // + position_embedding(position_ids), position_ids = arange(N) for a whole tile.
  const NaiveSiglipTower tower = naive_siglip_tower(d);
  Mat x = naive_siglip_embeddings(tower, m, w, chw);
  // Idefics3Encoder: pre-LN SigLIP layers, no attention mask (all patches real).
  for (int64_t l = 0; l < d.depth; ++l) {
    const std::string p = m + "encoder.layers." + std::to_string(l) + ".";
    naive_siglip_layer(tower, p, w, n, x);
  }
  x = layer_norm(x, n, h, w(m + "post_layernorm.weight"), w(m + "post_layernorm.bias"), d.eps);
  // Idefics3Connector: pixel_shuffle, then modality_projection.proj (nn.Linear, bias=False).
  const int64_t t = n / (d.scale * d.scale), wide = h * d.scale * d.scale;
  const Mat shuffled = naive_idefics3_pixel_shuffle(x, n, h, d.scale);
  return linear(shuffled, t, wide, w(d.prefix + "connector.modality_projection.proj.weight"), {},
                d.text_hidden);
}

}  // namespace qbc::ref::testing
