// A naive Qwen3-VL vision tower forward pass, for cross-checking the vision MBLT graph.
//
// Written from transformers' modeling_qwen3_vl.py (Qwen3VLVisionModel.forward: patch_embed, a
// Conv3d with bias; fast_pos_embed_interpolate, the four-corner bilinear lookup of the learned
// position grid at linspace(0, side - 1, h) x linspace(0, side - 1, w) and its
// view/permute into merge-group order; rot_pos_emb; Qwen3VLVisionBlock with nn.LayerNorm(eps
// 1e-6) and linear_fc2(gelu_pytorch_tanh(linear_fc1(x))); the DeepStack mergers after the
// blocks of deepstack_visual_indexes, Qwen3VLVisionPatchMerger(use_postshuffle_norm=True); the
// final merger without it), not from qbc's graph builder or its host layout: double precision,
// plain loops and std::vector. One image (grid_t = 1), pixel rows in HF's patch order.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "naive_llava_clip.h"   // nn.LayerNorm (naive_clip_internal::layer_norm)
#include "naive_qwen_vision.h"  // nn.Linear (naive_vision_internal::linear)

namespace qbc::ref::testing {

/// The Qwen3VLVisionConfig values the HF module reads.
struct NaiveQwen3VisionDims {
  int64_t depth = 0, hidden = 0, heads = 0, ffn = 0, out_hidden = 0;
  int64_t patch = 16, temporal_patch = 2, merge = 2, num_position_embeddings = 2304;
  std::vector<int64_t> deepstack;  ///< deepstack_visual_indexes
};

struct NaiveQwen3VisionOut {
  std::vector<double> features;                ///< merger output [n / merge², out_hidden]
  std::vector<std::vector<double>> deepstack;  ///< one per deepstack_visual_indexes entry
};

inline NaiveQwen3VisionOut naive_qwen3_vision(
    const NaiveQwen3VisionDims& d, const std::function<std::vector<float>(const std::string&)>& w,
    const std::vector<float>& pixel_values, int64_t grid_h, int64_t grid_w) {
  using Mat = std::vector<double>;
  using naive_vision_internal::linear;
  const int64_t n = grid_h * grid_w, C = d.hidden, H = d.heads, hd = C / H, m = d.merge,
                unit = m * m, wide = C * unit;
  const int64_t patch_in = 3 * d.temporal_patch * d.patch * d.patch;
  const auto at = [](auto& v, int64_t i) -> auto& { return v[static_cast<size_t>(i)]; };

  Mat px(pixel_values.begin(), pixel_values.end());
  Mat x = linear(px, n, patch_in, w("visual.patch_embed.proj.weight"),
                 w("visual.patch_embed.proj.bias"), C);

  // fast_pos_embed_interpolate: row-major over (h, w), then view(h/m, m, w/m, m, C) and
  // permute(0, 2, 1, 3) into merge-group order.
  const std::vector<float> table = w("visual.pos_embed.weight");
  const auto side = static_cast<int64_t>(std::sqrt(static_cast<double>(d.num_position_embeddings)));
  const auto linspace = [side](int64_t count) {
    std::vector<double> v(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i)
      v[static_cast<size_t>(i)] =
          count == 1 ? 0.0 : static_cast<double>(side - 1) * i / static_cast<double>(count - 1);
    return v;
  };
  const std::vector<double> hs = linspace(grid_h), ws = linspace(grid_w);
  Mat pos_rm(static_cast<size_t>(n * C));
  for (int64_t r = 0; r < grid_h; ++r) {
    for (int64_t c = 0; c < grid_w; ++c) {
      const auto hf = static_cast<int64_t>(at(hs, r)), wf = static_cast<int64_t>(at(ws, c));
      const int64_t hc = std::min(hf + 1, side - 1), wc = std::min(wf + 1, side - 1);
      const double dh = at(hs, r) - static_cast<double>(hf),
                   dw = at(ws, c) - static_cast<double>(wf);
      const int64_t idx[4] = {hf * side + wf, hf * side + wc, hc * side + wf, hc * side + wc};
      const double wt[4] = {(1 - dh) * (1 - dw), (1 - dh) * dw, dh * (1 - dw), dh * dw};
      for (int64_t e = 0; e < C; ++e) {
        double v = 0.0;
        for (int k = 0; k < 4; ++k) v += static_cast<double>(at(table, idx[k] * C + e)) * wt[k];
        at(pos_rm, (r * grid_w + c) * C + e) = v;
      }
    }
  }
  {
    int64_t row = 0;
    for (int64_t a = 0; a < grid_h / m; ++a)
      for (int64_t b = 0; b < grid_w / m; ++b)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < m; ++j, ++row)
            for (int64_t e = 0; e < C; ++e)
              at(x, row * C + e) += at(pos_rm, ((a * m + i) * grid_w + b * m + j) * C + e);
  }

  // rot_pos_emb: (row, column) of each patch in merge-group order; Qwen3VLVisionRotaryEmbedding
  // (head_dim / 2) with theta 1e4; emb = cat(freqs, freqs).
  const int64_t dim = hd / 2;
  std::vector<double> inv_freq;
  for (int64_t i = 0; i < dim; i += 2)
    inv_freq.push_back(1.0 / std::pow(10000.0, static_cast<double>(i) / dim));
  const auto nf = static_cast<int64_t>(inv_freq.size());
  Mat cosv(static_cast<size_t>(n * hd)), sinv(static_cast<size_t>(n * hd));
  {
    int64_t r = 0;
    for (int64_t a = 0; a < grid_h / m; ++a)
      for (int64_t b = 0; b < grid_w / m; ++b)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < m; ++j, ++r)
            for (int64_t e = 0; e < hd; ++e) {
              const int64_t f = e % (2 * nf);
              const double p =
                  f < nf ? static_cast<double>(a * m + i) : static_cast<double>(b * m + j);
              const double ang = p * at(inv_freq, f % nf);
              at(cosv, r * hd + e) = std::cos(ang);
              at(sinv, r * hd + e) = std::sin(ang);
            }
  }

  const auto ln = [&](const Mat& v, int64_t rows, int64_t width, const std::string& name) {
    return naive_clip_internal::layer_norm(v, rows, width, w(name + ".weight"), w(name + ".bias"),
                                           1e-6);
  };
  const auto gelu_erf = [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); };
  // Qwen3VLVisionPatchMerger: the norm before (per patch) or after (per merged row) the
  // view(-1, C·merge²), then linear_fc1, nn.GELU(), linear_fc2.
  const auto merger = [&](const Mat& v, const std::string& p, bool postshuffle) {
    const int64_t groups = n / unit;
    const Mat normed = postshuffle ? ln(v, groups, wide, p + "norm") : ln(v, n, C, p + "norm");
    Mat h =
        linear(normed, groups, wide, w(p + "linear_fc1.weight"), w(p + "linear_fc1.bias"), wide);
    for (double& e : h) e = gelu_erf(e);
    return linear(h, groups, wide, w(p + "linear_fc2.weight"), w(p + "linear_fc2.bias"),
                  d.out_hidden);
  };

  NaiveQwen3VisionOut out;
  for (int64_t layer = 0; layer < d.depth; ++layer) {
    const std::string p = "visual.blocks." + std::to_string(layer) + ".";
    const Mat h1 = ln(x, n, C, p + "norm1");
    const Mat qkv = linear(h1, n, C, w(p + "attn.qkv.weight"), w(p + "attn.qkv.bias"), 3 * C);
    const auto val = [&](int64_t which, int64_t t, int64_t head, int64_t e) {
      return at(qkv, t * 3 * C + which * C + head * hd + e);
    };
    const auto roped = [&](int64_t which, int64_t t, int64_t head, int64_t e) {
      const double half =
          e < hd / 2 ? -val(which, t, head, e + hd / 2) : val(which, t, head, e - hd / 2);
      return val(which, t, head, e) * at(cosv, t * hd + e) + half * at(sinv, t * hd + e);
    };
    Mat attn(static_cast<size_t>(n * C), 0.0);
    std::vector<double> sc(static_cast<size_t>(n));
    for (int64_t head = 0; head < H; ++head) {
      for (int64_t t = 0; t < n; ++t) {
        double mx = -INFINITY;
        for (int64_t u = 0; u < n; ++u) {
          double s = 0.0;
          for (int64_t e = 0; e < hd; ++e) s += roped(0, t, head, e) * roped(1, u, head, e);
          at(sc, u) = s / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, at(sc, u));
        }
        double z = 0.0;
        for (int64_t u = 0; u < n; ++u) z += std::exp(at(sc, u) - mx);
        for (int64_t u = 0; u < n; ++u) {
          const double pr = std::exp(at(sc, u) - mx) / z;
          for (int64_t e = 0; e < hd; ++e)
            at(attn, t * C + head * hd + e) += pr * val(2, u, head, e);
        }
      }
    }
    const Mat o = linear(attn, n, C, w(p + "attn.proj.weight"), w(p + "attn.proj.bias"), C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    const Mat h2 = ln(x, n, C, p + "norm2");
    Mat f = linear(h2, n, C, w(p + "mlp.linear_fc1.weight"), w(p + "mlp.linear_fc1.bias"), d.ffn);
    for (double& v : f)  // gelu_pytorch_tanh
      v = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    const Mat o2 =
        linear(f, n, d.ffn, w(p + "mlp.linear_fc2.weight"), w(p + "mlp.linear_fc2.bias"), C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o2[i];
    const auto tap = std::find(d.deepstack.begin(), d.deepstack.end(), layer);
    if (tap != d.deepstack.end()) {
      const std::string mp =
          "visual.deepstack_merger_list." + std::to_string(tap - d.deepstack.begin()) + ".";
      out.deepstack.push_back(merger(x, mp, /*postshuffle=*/true));
    }
  }
  out.features = merger(x, "visual.merger.", /*postshuffle=*/false);
  return out;
}

}  // namespace qbc::ref::testing
