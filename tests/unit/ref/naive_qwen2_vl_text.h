// A naive float64 forward pass of the Qwen2-VL / Qwen2.5-VL language model, for cross-checking
// the float reference runtime on prompts with an image span.
//
// Written from transformers' modeling_qwen2_5_vl.py, not from qbc's graph builder or
// runner/mrope.h: Qwen2_5_VLModel.get_rope_index (images), Qwen2_5_VLRotaryEmbedding (cos/sin of
// cat(freqs, freqs) per position stream), apply_multimodal_rotary_pos_emb (the
// `mrope_section * 2` split, chunk k taking stream k % 3, rotate_half), Qwen2_5_VLAttention
// (q/k/v biases, repeat_kv, causal softmax at 1/sqrt(head_dim)), Qwen2RMSNorm, Qwen2MLP (SiLU),
// the decoder layer's two residuals, the final norm and lm_head. std::vector and loops in
// double; weights by their HF names. Header-only: tests/unit/ref builds one binary per test.
// Qwen3-VL's language model (modeling_qwen3_vl.py) differs in three places, selected by the
// dims: no q/k/v biases, Qwen3's per-head q_norm / k_norm (RMSNorm over head_dim) before the
// rotation, and Qwen3VLTextRotaryEmbedding.apply_interleaved_mrope: the temporal frequencies
// freqs[0], with freqs[1] written into slice(1, 3 * section[1], 3) and freqs[2] into
// slice(2, 3 * section[2], 3), then cat(freqs_t, freqs_t). Its text model takes no DeepStack
// rows here (a text prompt, or image features at the embeddings only).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace qbc::ref::testing {

struct NaiveQwen2VlDims {
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0, vocab = 0;
  double eps = 1e-6, theta = 1e6;
  std::array<int64_t, 3> mrope_section{};
  bool tied = true;
  bool qkv_bias = true;      ///< Qwen2(.5)-VL; Qwen3-VL has none
  bool qk_norm = false;      ///< Qwen3-VL: q_norm / k_norm per head
  bool interleaved = false;  ///< Qwen3-VL: apply_interleaved_mrope
};

/// get_rope_index for a batch of one, images only (t = 1 each): `grids` are image_grid_thw rows
/// (t, h, w) in patches, divided by `merge` as HF does. Returns position_ids [3][n]; `*delta` gets
/// mrope_position_deltas.
inline std::array<std::vector<int64_t>, 3> hf_get_rope_index(
    const std::vector<int32_t>& input_ids, int32_t image_token_id,
    const std::vector<std::array<int64_t, 3>>& grids, int64_t merge, int64_t* delta) {
  std::vector<std::array<std::vector<int64_t>, 3>> llm_pos_ids_list;
  auto list_max = [](const std::array<std::vector<int64_t>, 3>& c) {
    int64_t m = INT64_MIN;
    for (const auto& row : c)
      for (int64_t v : row) m = std::max(m, v);
    return m;
  };
  const int64_t n = static_cast<int64_t>(input_ids.size());
  int64_t st = 0;
  for (const auto& thw : grids) {
    int64_t ed = st;  // input_tokens.index(image_token_id, st)
    while (input_ids[static_cast<size_t>(ed)] != image_token_id) ++ed;
    const int64_t t = thw[0], h = thw[1] / merge, w = thw[2] / merge;
    const int64_t text_len = ed - st;
    const int64_t st_idx = llm_pos_ids_list.empty() ? 0 : list_max(llm_pos_ids_list.back()) + 1;
    std::array<std::vector<int64_t>, 3> text;
    for (auto& row : text)
      for (int64_t i = 0; i < text_len; ++i) row.push_back(i + st_idx);
    llm_pos_ids_list.push_back(text);
    std::array<std::vector<int64_t>, 3> img;
    for (int64_t a = 0; a < t; ++a) {
      for (int64_t b = 0; b < h; ++b) {
        for (int64_t c = 0; c < w; ++c) {
          img[0].push_back(a * 0 + text_len + st_idx);  // time_tensor = t * second_per_grid_t(0)
          img[1].push_back(b + text_len + st_idx);
          img[2].push_back(c + text_len + st_idx);
        }
      }
    }
    llm_pos_ids_list.push_back(img);
    st = ed + t * h * w;
  }
  if (st < n) {
    const int64_t st_idx = llm_pos_ids_list.empty() ? 0 : list_max(llm_pos_ids_list.back()) + 1;
    std::array<std::vector<int64_t>, 3> text;
    for (auto& row : text)
      for (int64_t i = 0; i < n - st; ++i) row.push_back(i + st_idx);
    llm_pos_ids_list.push_back(text);
  }
  std::array<std::vector<int64_t>, 3> out;
  int64_t mx = INT64_MIN;
  for (const auto& c : llm_pos_ids_list) {
    for (int s = 0; s < 3; ++s) out[s].insert(out[s].end(), c[s].begin(), c[s].end());
    if (!c[0].empty()) mx = std::max(mx, list_max(c));
  }
  *delta = mx + 1 - n;
  return out;
}

/// Logits [n, vocab] of the language model for `embeds` [n, hidden] (inputs_embeds, image rows
/// already spliced in) at `position_ids` [3][n].
/// `deepstack` (Qwen3-VL): per decoder layer J < deepstack.size(), rows [n, hidden] added to
/// the hidden states after layer J (Qwen3VLTextModel._deepstack_process with the image rows
/// scattered to their positions: zero elsewhere).
inline std::vector<double> naive_qwen2_vl_logits(
    const NaiveQwen2VlDims& d, const std::function<std::vector<float>(const std::string&)>& hf,
    const std::vector<double>& embeds, const std::array<std::vector<int64_t>, 3>& position_ids,
    const std::vector<std::vector<double>>& deepstack = {}) {
  const int64_t n = static_cast<int64_t>(position_ids[0].size()), H = d.hidden, hd = d.head_dim;
  auto w = [&](const std::string& name) {
    const std::vector<float> f = hf(name);
    return std::vector<double>(f.begin(), f.end());
  };
  auto linear = [&](const std::vector<double>& x, const std::string& mod, int64_t out, int64_t in,
                    bool bias) {
    const std::vector<double> W = w(mod + ".weight");
    const std::vector<double> b = bias ? w(mod + ".bias") : std::vector<double>(out, 0.0);
    std::vector<double> y(static_cast<size_t>(n * out));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t o = 0; o < out; ++o) {
        double acc = b[o];
        for (int64_t i = 0; i < in; ++i) acc += x[t * in + i] * W[o * in + i];
        y[t * out + o] = acc;
      }
    return y;
  };
  auto rms = [&](const std::vector<double>& x, const std::string& name) {
    const std::vector<double> g = w(name);
    std::vector<double> y(x.size());
    for (int64_t t = 0; t < n; ++t) {
      double ss = 0;
      for (int64_t i = 0; i < H; ++i) ss += x[t * H + i] * x[t * H + i];
      const double inv = 1.0 / std::sqrt(ss / H + d.eps);
      for (int64_t i = 0; i < H; ++i) y[t * H + i] = g[i] * (x[t * H + i] * inv);
    }
    return y;
  };
  // cos, sin [3][n][hd] = cos/sin(cat(freqs, freqs)), freqs = pos * inv_freq.
  std::vector<double> inv_freq(static_cast<size_t>(hd / 2));
  for (int64_t i = 0; i < hd / 2; ++i)
    inv_freq[i] = 1.0 / std::pow(d.theta, double(2 * i) / double(hd));
  // apply_multimodal_rotary_pos_emb: split [s0, s1, s2, s0, s1, s2] along head_dim, chunk k from
  // stream k % 3.
  std::vector<int64_t> stream_of(static_cast<size_t>(hd));
  if (!d.interleaved) {
    int64_t j = 0;
    for (int k = 0; k < 6; ++k)
      for (int64_t c = 0; c < d.mrope_section[k % 3]; ++c) stream_of[j++] = k % 3;
  } else {
    // freqs_t = freqs[0]; for dim, offset in ((1, 1), (2, 2)):
    //   freqs_t[..., offset:3 * section[dim]:3] = freqs[dim, ..., offset:3 * section[dim]:3]
    std::vector<int64_t> half_stream(static_cast<size_t>(hd / 2), 0);
    for (int64_t dim = 1; dim <= 2; ++dim)
      for (int64_t i = dim; i < std::min(3 * d.mrope_section[dim], hd / 2); i += 3)
        half_stream[i] = dim;
    for (int64_t j = 0; j < hd; ++j) stream_of[j] = half_stream[j % (hd / 2)];  // cat(f, f)
  }
  // Qwen3's q_norm / k_norm: RMSNorm over each head's head_dim values.
  auto head_rms = [&](std::vector<double>& x, int64_t heads, const std::string& name) {
    const std::vector<double> g = w(name);
    for (int64_t r = 0; r < n * heads; ++r) {
      double ss = 0;
      for (int64_t c = 0; c < hd; ++c) ss += x[r * hd + c] * x[r * hd + c];
      const double inv = 1.0 / std::sqrt(ss / hd + d.eps);
      for (int64_t c = 0; c < hd; ++c) x[r * hd + c] = g[c] * (x[r * hd + c] * inv);
    }
  };
  auto rotate = [&](std::vector<double>& x, int64_t heads) {
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < heads; ++h) {
        double* v = &x[(t * heads + h) * hd];
        std::vector<double> out(static_cast<size_t>(hd));
        for (int64_t j = 0; j < hd; ++j) {
          const double pos = double(position_ids[stream_of[j]][t]);
          const double ang = pos * inv_freq[j % (hd / 2)];
          const double rot = j < hd / 2 ? -v[j + hd / 2] : v[j - hd / 2];
          out[j] = v[j] * std::cos(ang) + rot * std::sin(ang);
        }
        std::copy(out.begin(), out.end(), v);
      }
  };
  std::vector<double> x = embeds;
  for (int64_t l = 0; l < d.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::vector<double> xn = rms(x, p + "input_layernorm.weight");
    std::vector<double> q = linear(xn, p + "self_attn.q_proj", d.heads * hd, H, d.qkv_bias);
    std::vector<double> k = linear(xn, p + "self_attn.k_proj", d.kv_heads * hd, H, d.qkv_bias);
    const std::vector<double> v =
        linear(xn, p + "self_attn.v_proj", d.kv_heads * hd, H, d.qkv_bias);
    if (d.qk_norm) {
      head_rms(q, d.heads, p + "self_attn.q_norm.weight");
      head_rms(k, d.kv_heads, p + "self_attn.k_norm.weight");
    }
    rotate(q, d.heads);
    rotate(k, d.kv_heads);
    const int64_t rep = d.heads / d.kv_heads;
    std::vector<double> att(static_cast<size_t>(n * d.heads * hd), 0.0);
    for (int64_t h = 0; h < d.heads; ++h) {
      const int64_t kvh = h / rep;  // repeat_kv
      for (int64_t i = 0; i < n; ++i) {
        std::vector<double> sc(static_cast<size_t>(i + 1));
        double mx = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < hd; ++c)
            dot += q[(i * d.heads + h) * hd + c] * k[(j * d.kv_heads + kvh) * hd + c];
          sc[j] = dot / std::sqrt(double(hd));
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (double& s : sc) sum += (s = std::exp(s - mx));
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t c = 0; c < hd; ++c)
            att[(i * d.heads + h) * hd + c] += sc[j] / sum * v[(j * d.kv_heads + kvh) * hd + c];
      }
    }
    const std::vector<double> o = linear(att, p + "self_attn.o_proj", H, d.heads * hd, false);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    const std::vector<double> xn2 = rms(x, p + "post_attention_layernorm.weight");
    const std::vector<double> g = linear(xn2, p + "mlp.gate_proj", d.ffn, H, false);
    const std::vector<double> u = linear(xn2, p + "mlp.up_proj", d.ffn, H, false);
    std::vector<double> a(g.size());
    for (size_t i = 0; i < g.size(); ++i) a[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
    const std::vector<double> dn = linear(a, p + "mlp.down_proj", H, d.ffn, false);
    for (size_t i = 0; i < x.size(); ++i) x[i] += dn[i];
    if (l < static_cast<int64_t>(deepstack.size()))
      for (size_t i = 0; i < x.size(); ++i) x[i] += deepstack[static_cast<size_t>(l)][i];
  }
  const std::vector<double> xf = rms(x, "model.norm.weight");
  return linear(xf, d.tied ? "model.embed_tokens" : "lm_head", d.vocab, H, false);
}

}  // namespace qbc::ref::testing
