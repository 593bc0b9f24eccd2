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
// reference's (naive_llava_clip.h); the encoder layer is the one of naive_idefics3_vision.h
// (Idefics3EncoderLayer is SiglipEncoderLayer), which applies post_layernorm and the pixel
// shuffle to the last layer and so is not reused whole. Header-only because tests/unit/ref
// builds one binary per *_test.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "naive_llava_clip.h"

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
  const int64_t g = d.image / d.patch, n = g * g, h = d.hidden, hd = h / d.heads;
  // SiglipVisionEmbeddings: patch_embedding(pixel_values) (output side floor(image / patch)),
  // .flatten(2).transpose(1, 2), + position_embedding(position_ids), position_ids = arange(N).
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
  // SiglipEncoder: hidden_states = (embeddings, layer 1 out, ..., layer depth out).
  std::vector<Mat> states{x};
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
        for (int64_t j = 0; j < n; ++j) {  // no mask: every patch attends to every patch
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
