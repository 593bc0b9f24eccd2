// A naive Qwen2.5-VL / Qwen2-VL vision tower forward pass, for cross-checking the vision MBLT
// graph.
//
// Written from transformers' modeling_qwen2_5_vl.py (Qwen2_5_VisionTransformerPretrainedModel:
// patch_embed, rot_pos_emb, get_window_index, the blocks with cu_seqlens masks, the merger and
// the final argsort) and modeling_qwen2_vl.py (Qwen2VisionTransformerPretrainedModel: the same
// patch_embed and rot_pos_emb, Qwen2VLVisionBlock with LayerNorm(eps=1e-6) and VisionMlp
// fc2(quick_gelu(fc1)), one cu_seqlens segment per frame, PatchMerger with a LayerNorm ln_q),
// not from qbc's graph builder or its host layout: double precision, plain loops and
// std::vector, HF's padded-window construction and HF's patch order. Header-only because
// tests/unit/ref builds one binary per *_test.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "naive_llava_clip.h"  // nn.LayerNorm (naive_clip_internal::layer_norm)

namespace qbc::ref::testing {

/// The vision_config values the HF module reads.
struct NaiveVisionDims {
  int64_t depth = 0, hidden = 0, heads = 0, ffn = 0, out_hidden = 0;
  int64_t patch = 14, temporal_patch = 2, merge = 2, window_size = 112;
  std::vector<int64_t> fullatt_blocks;
  bool qwen2 = false;  ///< Qwen2-VL: LayerNorms, fc1/quick_gelu/fc2, no windows
};

namespace naive_vision_internal {

using Mat = std::vector<double>;  // row-major

/// y[n, out] = x[n, in] · Wᵀ + b (nn.Linear), W read by HF name.
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

/// Qwen2RMSNorm(eps = 1e-6) over rows of `d`.
inline Mat rms_norm(const Mat& x, int64_t n, int64_t d, const std::vector<float>& w) {
  Mat y(x.size());
  for (int64_t r = 0; r < n; ++r) {
    double ss = 0.0;
    for (int64_t i = 0; i < d; ++i)
      ss += x[static_cast<size_t>(r * d + i)] * x[static_cast<size_t>(r * d + i)];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + 1e-6);
    for (int64_t i = 0; i < d; ++i)
      y[static_cast<size_t>(r * d + i)] =
          w[static_cast<size_t>(i)] * (x[static_cast<size_t>(r * d + i)] * inv);
  }
  return y;
}

}  // namespace naive_vision_internal

/// The image features [grid_h·grid_w / merge², out_hidden] of `pixel_values`
/// [grid_h·grid_w, 3·tp·p²] (HF patch order, one image, grid_t = 1); `w(name)` returns an HF
/// tensor's float32 values.
inline std::vector<double> naive_qwen_vision(
    const NaiveVisionDims& d, const std::function<std::vector<float>(const std::string&)>& w,
    const std::vector<float>& pixel_values, int64_t grid_h, int64_t grid_w) {
  using namespace naive_vision_internal;
  const int64_t n = grid_h * grid_w, C = d.hidden, H = d.heads, hd = C / H, m = d.merge,
                unit = m * m;
  const int64_t patch_in = 3 * d.temporal_patch * d.patch * d.patch;
  // patch_embed: Conv3d with kernel == stride over each (3, tp, p, p) patch.
  Mat px(pixel_values.begin(), pixel_values.end());
  Mat x = linear(px, n, patch_in, w("visual.patch_embed.proj.weight"), {}, C);

  // rot_pos_emb: (hpos, wpos) of each patch in merge-group order; freqs = pos ⊗ inv_freq with
  // inv_freq = 1 / 10000^(arange(0, dim, 2) / dim), dim = head_dim / 2.
  const int64_t dim = hd / 2;
  std::vector<double> inv_freq;
  for (int64_t i = 0; i < dim; i += 2)
    inv_freq.push_back(1.0 / std::pow(10000.0, static_cast<double>(i) / dim));
  const int64_t nf = static_cast<int64_t>(inv_freq.size());
  Mat rot(static_cast<size_t>(n * 2 * nf));  // [n, 2·nf]: h freqs then w freqs
  {
    int64_t r = 0;
    for (int64_t a = 0; a < grid_h / m; ++a)
      for (int64_t b = 0; b < grid_w / m; ++b)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < m; ++j, ++r)
            for (int64_t f = 0; f < nf; ++f) {
              rot[static_cast<size_t>(r * 2 * nf + f)] =
                  static_cast<double>(a * m + i) * inv_freq[static_cast<size_t>(f)];
              rot[static_cast<size_t>(r * 2 * nf + nf + f)] =
                  static_cast<double>(b * m + j) * inv_freq[static_cast<size_t>(f)];
            }
  }

  // get_window_index: pad the merged grid to whole windows with -100, walk windows row-major.
  // Qwen2-VL has none: one window holding the whole (merged) grid keeps HF's order.
  const int64_t lh = grid_h / m, lw = grid_w / m;
  const int64_t vws = d.qwen2 ? std::max(lh, lw) : d.window_size / m / d.patch;
  const int64_t pad_h = vws - lh % vws, pad_w = vws - lw % vws;
  const int64_t nwh = (lh + pad_h) / vws, nww = (lw + pad_w) / vws;
  std::vector<int64_t> window_index, cu_window = {0};
  for (int64_t wh = 0; wh < nwh; ++wh) {
    for (int64_t ww = 0; ww < nww; ++ww) {
      int64_t count = 0;
      for (int64_t i = 0; i < vws; ++i) {
        for (int64_t j = 0; j < vws; ++j) {
          const int64_t r = wh * vws + i, c = ww * vws + j;
          const int64_t idx = (r < lh && c < lw) ? r * lw + c : -100;
          if (idx == -100) continue;
          window_index.push_back(idx);
          ++count;
        }
      }
      cu_window.push_back(cu_window.back() + count * unit);
    }
  }
  cu_window.erase(std::unique(cu_window.begin(), cu_window.end()),
                  cu_window.end());  // unique_consecutive

  // Gather hidden states and rotary angles by window_index (in groups of merge² rows).
  auto gather = [&](const Mat& v, int64_t width) {
    Mat out(v.size());
    for (size_t k = 0; k < window_index.size(); ++k)
      for (int64_t e = 0; e < unit * width; ++e)
        out[static_cast<size_t>(static_cast<int64_t>(k) * unit * width + e)] =
            v[static_cast<size_t>(window_index[k] * unit * width + e)];
    return out;
  };
  x = gather(x, C);
  rot = gather(rot, 2 * nf);
  // emb = cat(rot, rot); cos, sin of it: [n, hd].
  Mat cosv(static_cast<size_t>(n * hd)), sinv(static_cast<size_t>(n * hd));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t e = 0; e < hd; ++e) {
      const double a = rot[static_cast<size_t>(r * 2 * nf + e % (2 * nf))];
      cosv[static_cast<size_t>(r * hd + e)] = std::cos(a);
      sinv[static_cast<size_t>(r * hd + e)] = std::sin(a);
    }
  const std::vector<int64_t> cu_full = {0, n};

  // The blocks' norm: Qwen2RMSNorm (Qwen2.5-VL) or nn.LayerNorm with bias (Qwen2-VL).
  auto norm = [&](const Mat& v, int64_t rows, int64_t width, const std::string& name) {
    return d.qwen2 ? naive_clip_internal::layer_norm(v, rows, width, w(name + ".weight"),
                                                     w(name + ".bias"), 1e-6)
                   : rms_norm(v, rows, width, w(name + ".weight"));
  };
  for (int64_t layer = 0; layer < d.depth; ++layer) {
    const std::string p = "visual.blocks." + std::to_string(layer) + ".";
    const bool full = d.qwen2 || std::find(d.fullatt_blocks.begin(), d.fullatt_blocks.end(),
                                           layer) != d.fullatt_blocks.end();
    const std::vector<int64_t>& cu = full ? cu_full : cu_window;
    std::vector<int64_t> seg(static_cast<size_t>(n));
    for (size_t s = 0; s + 1 < cu.size(); ++s)
      for (int64_t t = cu[s]; t < cu[s + 1]; ++t)
        seg[static_cast<size_t>(t)] = static_cast<int64_t>(s);
    // Attention: qkv → reshape(n, 3, H, hd); rotate_half rope on q, k; masked softmax.
    const Mat h1 = norm(x, n, C, p + "norm1");
    const Mat qkv = linear(h1, n, C, w(p + "attn.qkv.weight"), w(p + "attn.qkv.bias"), 3 * C);
    auto at = [&](int64_t which, int64_t t, int64_t head, int64_t e) {
      return qkv[static_cast<size_t>(t * 3 * C + which * C + head * hd + e)];
    };
    auto roped = [&](int64_t which, int64_t t, int64_t head, int64_t e) {
      const double rot_half =
          e < hd / 2 ? -at(which, t, head, e + hd / 2) : at(which, t, head, e - hd / 2);
      return at(which, t, head, e) * cosv[static_cast<size_t>(t * hd + e)] +
             rot_half * sinv[static_cast<size_t>(t * hd + e)];
    };
    Mat q(static_cast<size_t>(n * C)), k(static_cast<size_t>(n * C));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t head = 0; head < H; ++head)
        for (int64_t e = 0; e < hd; ++e) {
          q[static_cast<size_t>(t * C + head * hd + e)] = roped(0, t, head, e);
          k[static_cast<size_t>(t * C + head * hd + e)] = roped(1, t, head, e);
        }
    Mat attn(static_cast<size_t>(n * C), 0.0);
    std::vector<double> sc(static_cast<size_t>(n));
    for (int64_t head = 0; head < H; ++head) {
      for (int64_t t = 0; t < n; ++t) {
        double mx = -INFINITY;
        for (int64_t u = 0; u < n; ++u) {
          if (seg[static_cast<size_t>(u)] != seg[static_cast<size_t>(t)]) continue;
          double s = 0.0;
          for (int64_t e = 0; e < hd; ++e)
            s += q[static_cast<size_t>(t * C + head * hd + e)] *
                 k[static_cast<size_t>(u * C + head * hd + e)];
          sc[static_cast<size_t>(u)] = s / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, sc[static_cast<size_t>(u)]);
        }
        double z = 0.0;
        for (int64_t u = 0; u < n; ++u)
          if (seg[static_cast<size_t>(u)] == seg[static_cast<size_t>(t)])
            z += std::exp(sc[static_cast<size_t>(u)] - mx);
        for (int64_t u = 0; u < n; ++u) {
          if (seg[static_cast<size_t>(u)] != seg[static_cast<size_t>(t)]) continue;
          const double pr = std::exp(sc[static_cast<size_t>(u)] - mx) / z;
          for (int64_t e = 0; e < hd; ++e)
            attn[static_cast<size_t>(t * C + head * hd + e)] += pr * at(2, u, head, e);
        }
      }
    }
    const Mat o = linear(attn, n, C, w(p + "attn.proj.weight"), w(p + "attn.proj.bias"), C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    const Mat h2 = norm(x, n, C, p + "norm2");
    if (d.qwen2) {  // VisionMlp: fc2(quick_gelu(fc1(x))), quick_gelu(v) = v · σ(1.702 v)
      Mat f = linear(h2, n, C, w(p + "mlp.fc1.weight"), w(p + "mlp.fc1.bias"), d.ffn);
      for (double& v : f) v = v / (1.0 + std::exp(-1.702 * v));
      const Mat o2 = linear(f, n, d.ffn, w(p + "mlp.fc2.weight"), w(p + "mlp.fc2.bias"), C);
      for (size_t i = 0; i < x.size(); ++i) x[i] += o2[i];
      continue;
    }
    // MLP: down(silu(gate(x)) · up(x)), all with biases.
    const Mat g =
        linear(h2, n, C, w(p + "mlp.gate_proj.weight"), w(p + "mlp.gate_proj.bias"), d.ffn);
    Mat u = linear(h2, n, C, w(p + "mlp.up_proj.weight"), w(p + "mlp.up_proj.bias"), d.ffn);
    for (size_t i = 0; i < u.size(); ++i) u[i] *= g[i] / (1.0 + std::exp(-g[i]));
    const Mat down =
        linear(u, n, d.ffn, w(p + "mlp.down_proj.weight"), w(p + "mlp.down_proj.bias"), C);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }

  // Merger: ln_q, view(-1, C·merge²), Linear, GELU (erf), Linear; then rows back by argsort.
  const int64_t groups = n / unit, wide = C * unit;
  const Mat ln = norm(x, n, C, "visual.merger.ln_q");
  Mat h = linear(ln, groups, wide, w("visual.merger.mlp.0.weight"), w("visual.merger.mlp.0.bias"),
                 wide);
  for (double& v : h) v = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
  const Mat y = linear(h, groups, wide, w("visual.merger.mlp.2.weight"),
                       w("visual.merger.mlp.2.bias"), d.out_hidden);
  std::vector<double> out(y.size());
  for (size_t k = 0; k < window_index.size(); ++k)
    for (int64_t e = 0; e < d.out_hidden; ++e)
      out[static_cast<size_t>(window_index[k] * d.out_hidden + e)] =
          y[static_cast<size_t>(static_cast<int64_t>(k) * d.out_hidden + e)];
  return out;
}

}  // namespace qbc::ref::testing
