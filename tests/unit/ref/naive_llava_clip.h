// A naive LLaVA-1.5 image-feature forward pass (CLIP vision tower + multimodal projector), for
// cross-checking the CLIP vision MBLT graph.
//
// Written from transformers' modeling_clip.py (CLIPVisionEmbeddings: Conv2d patch embedding over
// the pixel image, the class embedding concatenated in front, position_embedding added;
// CLIPVisionTransformer: pre_layrnorm, the encoder collecting hidden_states; CLIPEncoderLayer,
// CLIPAttention with q scaled by head_dim^-0.5, CLIPMLP with quick_gelu) and modeling_llava.py
// (get_image_features: hidden_states[vision_feature_layer], [:, 1:] for the "default" strategy,
// LlavaMultiModalProjector linear_1, GELU, linear_2), not from qbc's graph builder or its host
// helpers: double precision, plain loops, the convolution evaluated on the CHW image. Header-only
// because tests/unit/ref builds one binary per *_test.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace qbc::ref::testing {

/// The config values the HF modules read.
struct NaiveClipDims {
  int64_t depth = 0, hidden = 0, heads = 0, ffn = 0, text_hidden = 0;
  int64_t patch = 14, image = 336;
  int64_t feature_layer = -2;
  bool keep_cls = false;  ///< vision_feature_select_strategy "full"
  double eps = 1e-5;
};

namespace naive_clip_internal {

using Mat = std::vector<double>;  // row-major

inline Mat linear(const Mat& x, int64_t n, int64_t in, const std::vector<float>& w,
                  const std::vector<float>& b, int64_t out) {
  Mat y(static_cast<size_t>(n * out));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : b[static_cast<size_t>(o)];
      for (int64_t i = 0; i < in; ++i)
        acc += x[static_cast<size_t>(r * in + i)] * w[static_cast<size_t>(o * in + i)];
      y[static_cast<size_t>(r * out + o)] = acc;
    }
  }
  return y;
}

/// nn.LayerNorm(d, eps): biased variance.
inline Mat layer_norm(const Mat& x, int64_t n, int64_t d, const std::vector<float>& w,
                      const std::vector<float>& b, double eps) {
  Mat y(x.size());
  for (int64_t r = 0; r < n; ++r) {
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < d; ++i) mean += x[static_cast<size_t>(r * d + i)];
    mean /= static_cast<double>(d);
    for (int64_t i = 0; i < d; ++i) {
      const double c = x[static_cast<size_t>(r * d + i)] - mean;
      var += c * c;
    }
    const double inv = 1.0 / std::sqrt(var / static_cast<double>(d) + eps);
    for (int64_t i = 0; i < d; ++i) {
      const auto k = static_cast<size_t>(r * d + i);
      y[k] = (x[k] - mean) * inv * w[static_cast<size_t>(i)] + b[static_cast<size_t>(i)];
    }
  }
  return y;
}

}  // namespace naive_clip_internal

/// image_features of one CHW image [3, image, image]: [576, text_hidden] at 336 / 14 (the CLS row
/// dropped) or [577, text_hidden] with keep_cls. `w(name)` reads a checkpoint tensor as float32
/// under transformers < 4.52's names (vision_tower.vision_model.*, multi_modal_projector.*).
inline std::vector<double> naive_llava_image_features(
    const NaiveClipDims& d, const std::function<std::vector<float>(const std::string&)>& w,
    const std::vector<float>& chw) {
  using namespace naive_clip_internal;
  const std::string m = "vision_tower.vision_model.";
  const int64_t g = d.image / d.patch, n = 1 + g * g, h = d.hidden, hd = h / d.heads;
  // CLIPVisionEmbeddings: Conv2d(3, h, kernel = stride = patch, bias = False) over the image,
  // flatten(2).transpose(1, 2), cat(class_embedding, patches), + position_embedding(arange).
  const std::vector<float> conv = w(m + "embeddings.patch_embedding.weight");
  const std::vector<float> cls = w(m + "embeddings.class_embedding");
  const std::vector<float> pos = w(m + "embeddings.position_embedding.weight");
  Mat x(static_cast<size_t>(n * h));
  for (int64_t o = 0; o < h; ++o) x[static_cast<size_t>(o)] = cls[static_cast<size_t>(o)];
  for (int64_t oy = 0; oy < g; ++oy) {
    for (int64_t ox = 0; ox < g; ++ox) {
      for (int64_t o = 0; o < h; ++o) {
        double acc = 0.0;
        for (int64_t c = 0; c < 3; ++c)
          for (int64_t ky = 0; ky < d.patch; ++ky)
            for (int64_t kx = 0; kx < d.patch; ++kx)
              acc += static_cast<double>(
                         conv[static_cast<size_t>(((o * 3 + c) * d.patch + ky) * d.patch + kx)]) *
                     chw[static_cast<size_t>((c * d.image + oy * d.patch + ky) * d.image +
                                             ox * d.patch + kx)];
        x[static_cast<size_t>((1 + oy * g + ox) * h + o)] = acc;
      }
    }
  }
  for (size_t i = 0; i < x.size(); ++i) x[i] += pos[i];
  // CLIPVisionTransformer: pre_layrnorm, then hidden_states = (input, layer 1 out, ...).
  x = layer_norm(x, n, h, w(m + "pre_layrnorm.weight"), w(m + "pre_layrnorm.bias"), d.eps);
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
    for (double& e : q) e *= scale;
    Mat ctx(static_cast<size_t>(n * h), 0.0);
    std::vector<double> s(static_cast<size_t>(n));
    for (int64_t head = 0; head < d.heads; ++head) {
      for (int64_t i = 0; i < n; ++i) {
        double mx = -1e300;
        for (int64_t j = 0; j < n; ++j) {  // no mask: every token attends to every token
          double dot = 0.0;
          for (int64_t c = 0; c < hd; ++c)
            dot += q[static_cast<size_t>(i * h + head * hd + c)] *
                   k[static_cast<size_t>(j * h + head * hd + c)];
          s[static_cast<size_t>(j)] = dot;
          mx = std::max(mx, dot);
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
    for (double& e : f) e = e / (1.0 + std::exp(-1.702 * e));  // quick_gelu: x * sigmoid(1.702x)
    Mat f2 = lin(f, d.ffn, "mlp.fc2", h);
    for (size_t i = 0; i < x.size(); ++i) x[i] += f2[i];
    states.push_back(x);
  }
  // LlavaModel.get_image_features: hidden_states[vision_feature_layer], CLS dropped by default.
  const int64_t idx =
      d.feature_layer < 0 ? static_cast<int64_t>(states.size()) + d.feature_layer : d.feature_layer;
  Mat feat = states[static_cast<size_t>(idx)];
  int64_t rows = n;
  if (!d.keep_cls) {
    feat.erase(feat.begin(), feat.begin() + h);
    rows = n - 1;
  }
  const std::string pj = "multi_modal_projector.";
  Mat y = linear(feat, rows, h, w(pj + "linear_1.weight"), w(pj + "linear_1.bias"), d.text_hidden);
  for (double& e : y) e = 0.5 * e * (1.0 + std::erf(e / std::sqrt(2.0)));  // nn.GELU()
  return linear(y, rows, d.text_hidden, w(pj + "linear_2.weight"), w(pj + "linear_2.bias"),
                d.text_hidden);
}

}  // namespace qbc::ref::testing
