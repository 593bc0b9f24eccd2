// A naive LLaVA image-feature forward pass with a SigLIP vision tower (llava-interleave,
// LLaVA-OneVision's tower without AnyRes), for cross-checking the CLIP/SigLIP vision MBLT graph.
//
// Written from transformers' modeling_siglip.py (SiglipVisionEmbeddings: Conv2d(3, width,
// kernel = stride = patch, padding "valid") with bias over the pixel image, so a side that is not
// a multiple of the patch leaves its last side % patch pixels unread (384 / 14: 27 x 27 patches,
// 6 pixels dropped), flatten(2).transpose(1, 2), + position_embedding(arange(N)), no class token;
// SiglipVisionTransformer: no pre-norm, the encoder collecting hidden_states = (embeddings, layer 1
// out, ...), post_layernorm only on last_hidden_state; SiglipEncoderLayer: layer_norm1, attention
// with biased q/k/v/out_proj and softmax(q·k^T · head_dim^-0.5) over every patch, residual,
// layer_norm2, fc1, gelu_pytorch_tanh, fc2, residual) and modeling_llava.py (get_image_features:
// vision_tower(..., output_hidden_states=True).hidden_states[vision_feature_layer], `[:, 1:]` for
// the "default" strategy, which knows no tower without a CLS row; LlavaMultiModalProjector:
// linear_1, ACT2FN["gelu"] (the erf GELU), linear_2, both with bias). Not from qbc's graph
// builder or its host helpers (siglip_patch_rows, clip_embed_base): double precision, plain
// loops, the convolution on the CHW image. The linear and LayerNorm loops are the LLaVA CLIP
// reference's (naive_llava_clip.h); the embeddings and encoder layer are the SigLIP tower of
// naive_siglip.h, shared with the Gemma 3 and Idefics3 references. Header-only because
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

/// The config values the HF modules read, and the wrong variants a test tells apart.
struct NaiveLlavaSiglipDims {
  int64_t depth = 0, hidden = 0, heads = 0, ffn = 0, text_hidden = 0;
  int64_t patch = 14;          ///< vision_config.patch_size
  int64_t image = 384;         ///< the pixel side; the patch grid is image / patch (a "valid" conv)
  int64_t feature_layer = -1;  ///< vision_feature_layer
  bool full = true;            ///< vision_feature_select_strategy "full"; false: "default"
  double eps = 1e-6;           ///< vision_config.layer_norm_eps
  bool tanh_gelu = true;       ///< gelu_pytorch_tanh; false: the erf GELU (to tell them apart)
  bool post_layernorm = false;  ///< true: post_layernorm on the selected state (LLaVA has none)
};

/// image_features of one CHW image [3, image, image]: [N, text_hidden] with the "full" strategy,
/// [N - 1, text_hidden] with "default", N = (image / patch)². `w(name)` reads a checkpoint
/// tensor as float32 under transformers < 4.52's names (vision_tower.vision_model.*,
/// multi_modal_projector.*).
inline std::vector<double> naive_llava_siglip_image_features(
    const NaiveLlavaSiglipDims& d, const std::function<std::vector<float>(const std::string&)>& w,
    const std::vector<float>& chw) {
  using naive_clip_internal::layer_norm;
  using naive_clip_internal::linear;
  using Mat = std::vector<double>;
  const std::string m = "vision_tower.vision_model.";
  const int64_t g = d.image / d.patch, n = g * g, h = d.hidden;
  // SiglipVisionEmbeddings: patch_embedding(pixel_values) (output side floor(image / patch)),
  // .flatten(2).transpose(1, 2), + position_embedding(position_ids), position_ids = arange(N).
  const NaiveSiglipTower tower = naive_siglip_tower(d);
  Mat x = naive_siglip_embeddings(tower, m, w, chw);
  // SiglipEncoder: hidden_states = (embeddings, layer 1 out, ..., layer depth out).
  std::vector<Mat> states{x};
  for (int64_t l = 0; l < d.depth; ++l) {
    const std::string p = m + "encoder.layers." + std::to_string(l) + ".";
    naive_siglip_layer(tower, p, w, n, x);
    states.push_back(x);
  }
  // LlavaModel.get_image_features: hidden_states[vision_feature_layer] (post_layernorm is applied
  // to last_hidden_state only, which LLaVA does not read), `[:, 1:]` for "default".
  const int64_t idx =
      d.feature_layer < 0 ? static_cast<int64_t>(states.size()) + d.feature_layer : d.feature_layer;
  Mat feat = states[static_cast<size_t>(idx)];
  if (d.post_layernorm) {
    feat =
        layer_norm(feat, n, h, w(m + "post_layernorm.weight"), w(m + "post_layernorm.bias"), d.eps);
  }
  int64_t rows = n;
  if (!d.full) {
    feat.erase(feat.begin(), feat.begin() + h);
    rows = n - 1;
  }
  // LlavaMultiModalProjector: linear_1, GELU (erf), linear_2.
  const std::string pj = "multi_modal_projector.";
  Mat y = linear(feat, rows, h, w(pj + "linear_1.weight"), w(pj + "linear_1.bias"), d.text_hidden);
  for (double& e : y) e = 0.5 * e * (1.0 + std::erf(e / std::sqrt(2.0)));
  return linear(y, rows, d.text_hidden, w(pj + "linear_2.weight"), w(pj + "linear_2.bias"),
                d.text_hidden);
}

}  // namespace qbc::ref::testing
