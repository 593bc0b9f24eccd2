// A naive HuggingFace causal-decoder forward pass, for cross-checking the reference runtime.
//
// Written from the semantics of transformers' modeling_{llama,mistral,qwen2,qwen3,gemma2,gemma3,
// phi3,smollm3,exaone4,cohere2,hyperclovax}.py, EXAONE 3.5's remote modeling_exaone.py and
// modeling_rope_utils.py,
// not from qbc's IR or graph builder: double precision,
// std::vector and plain loops, no LibTorch. It reads weights by their HF tensor names and takes
// from HParams only what config.json says (sizes, flags, per-layer windows and RoPE bases, caps);
// everything HF hard-codes per family (norm style, post-norms, embedding scale, fused
// projections, which projections carry a bias) and every RoPE frequency computation is
// re-derived here. Header-only because tests/unit/ref builds one binary per *_test.cpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qbc/frontend/hparams.h"
#include "qbc/support/status.h"

namespace qbc::ref::testing {

/// Returns the float32 values of the HF tensor `hf_name` (row-major), or an empty vector when the
/// model has no such tensor.
using HfWeightFn = std::function<std::vector<float>(const std::string& hf_name)>;

/// Inverse frequencies and cos/sin multiplier of one layer's RoPE for one forward call.
struct NaiveRope {
  std::vector<double> inv_freq;  ///< rotary_dim / 2 values.
  double attention_factor = 1.0;
};

namespace naive_internal {

constexpr double kPi = 3.14159265358979323846;

/// HF `_compute_default_rope_parameters`: f_i = base^(-2i / dim).
inline std::vector<double> default_inv_freq(double base, int64_t dim) {
  std::vector<double> f(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    f[static_cast<size_t>(i)] =
        1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(dim));
  }
  return f;
}

/// YaRN's `get_mscale`.
inline double yarn_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

/// YaRN's `find_correction_dim`: the dimension whose wavelength makes `rotations` turns over
/// `max_pos` positions.
inline double yarn_correction_dim(double rotations, int64_t dim, double base, double max_pos) {
  return (static_cast<double>(dim) * std::log(max_pos / (rotations * 2.0 * kPi))) /
         (2.0 * std::log(base));
}

}  // namespace naive_internal

/// RoPE of decoder layer `layer` in one HF forward call whose largest position + 1 is `call_len`
/// (dynamic NTK and LongRoPE choose their frequencies from it, as HF's `dynamic_rope_update`
/// does per call). Configs that set `rope_scaling.attention_factor` explicitly are not modelled:
/// the factor is always derived as HF derives it when absent.
inline NaiveRope naive_rope(const frontend::HParams& hp, int64_t layer, int64_t call_len) {
  namespace ni = naive_internal;
  using frontend::RopeScalingType;
  const frontend::LayerAttention& la = hp.layers[static_cast<size_t>(layer)];
  const double base = la.rope_theta;
  const int64_t dim = hp.rotary_dim;
  const frontend::RopeScaling& rs = hp.rope_scaling;
  NaiveRope r;
  r.inv_freq = ni::default_inv_freq(base, dim);
  if (!la.rope_scaled) return r;
  const int64_t half = dim / 2;
  switch (rs.type) {
    case RopeScalingType::kNone:
      break;
    case RopeScalingType::kLinear:
      for (double& f : r.inv_freq) f /= rs.factor;
      break;
    case RopeScalingType::kDynamic: {
      // HF: original length = config.max_position_embeddings; the base grows once the call's
      // sequence length exceeds it.
      const double orig = static_cast<double>(hp.max_position_embeddings);
      if (static_cast<double>(call_len) > orig) {
        const double d = static_cast<double>(dim);
        const double grown =
            base * std::pow(rs.factor * static_cast<double>(call_len) / orig - (rs.factor - 1.0),
                            d / (d - 2.0));
        r.inv_freq = ni::default_inv_freq(grown, dim);
      }
      break;
    }
    case RopeScalingType::kYarn: {
      const double orig = rs.original_max_position_embeddings > 0
                              ? static_cast<double>(rs.original_max_position_embeddings)
                              : static_cast<double>(hp.max_position_embeddings);
      const double factor = rs.factor;
      if (rs.mscale != 0.0 && rs.mscale_all_dim != 0.0) {
        r.attention_factor =
            ni::yarn_mscale(factor, rs.mscale) / ni::yarn_mscale(factor, rs.mscale_all_dim);
      } else {
        r.attention_factor = ni::yarn_mscale(factor, 1.0);
      }
      double low = std::floor(ni::yarn_correction_dim(rs.beta_fast, dim, base, orig));
      double high = std::ceil(ni::yarn_correction_dim(rs.beta_slow, dim, base, orig));
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(dim - 1));
      if (low == high) high += 0.001;
      for (int64_t i = 0; i < half; ++i) {
        const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
        const double extrapolation = 1.0 - ramp;  // weight of the unscaled frequency
        const double f = r.inv_freq[static_cast<size_t>(i)];
        r.inv_freq[static_cast<size_t>(i)] =
            (f / factor) * (1.0 - extrapolation) + f * extrapolation;
      }
      break;
    }
    case RopeScalingType::kLlama3: {
      const double old_len = static_cast<double>(rs.original_max_position_embeddings);
      const double low_wavelen = old_len / rs.low_freq_factor;
      const double high_wavelen = old_len / rs.high_freq_factor;
      for (double& f : r.inv_freq) {
        const double wavelen = 2.0 * ni::kPi / f;
        if (wavelen < high_wavelen) continue;  // high frequencies: unchanged
        if (wavelen > low_wavelen) {
          f /= rs.factor;  // low frequencies: interpolated
          continue;
        }
        const double smooth =
            (old_len / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        f = (1.0 - smooth) * f / rs.factor + smooth * f;
      }
      break;
    }
    case RopeScalingType::kLongRope: {
      // Phi3: factor = max_position_embeddings / original_max_position_embeddings; long factors
      // once the call's length exceeds the original length.
      const double orig = static_cast<double>(rs.original_max_position_embeddings);
      const double factor = static_cast<double>(hp.max_position_embeddings) / orig;
      r.attention_factor = factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(factor) / std::log(orig));
      const std::vector<double>& ext =
          static_cast<double>(call_len) > orig ? rs.long_factor : rs.short_factor;
      for (int64_t i = 0; i < half; ++i) {
        r.inv_freq[static_cast<size_t>(i)] /= ext[static_cast<size_t>(i)];
      }
      break;
    }
  }
  return r;
}

/// A stateful naive decoder (batch 1) with a KV cache holding post-RoPE keys, as HF's cache does.
class NaiveDecoder {
 public:
  /// Loads every weight of `hp` through `weights`; kInvalidArgument naming the tensor when one
  /// is missing or has the wrong size.
  static StatusOr<std::unique_ptr<NaiveDecoder>> create(const frontend::HParams& hp,
                                                        const HfWeightFn& weights) {
    std::unique_ptr<NaiveDecoder> d(new NaiveDecoder(hp));
    QBC_RETURN_IF_ERROR(d->load(weights));
    d->reset();
    return d;
  }

  /// One HF forward call: runs `tokens` at the next positions and returns logits
  /// [tokens.size(), vocab] row-major.
  std::vector<double> forward(const std::vector<int32_t>& tokens) {
    const int64_t n = static_cast<int64_t>(tokens.size());
    const int64_t h = hp_.hidden_size;
    std::vector<double> x(static_cast<size_t>(n * h));
    // Gemma: embeddings times √hidden_size (Gemma2 `normalizer`, Gemma3 `embed_scale`).
    // HyperCLOVAX (GraniteModel): inputs_embeds * embedding_multiplier.
    const double embed_scale = gemma()         ? std::sqrt(static_cast<double>(h))
                               : hyperclovax() ? hp_.embedding_scale
                                               : 1.0;
    for (int64_t t = 0; t < n; ++t) {
      const double* row = &embed_[static_cast<size_t>(tokens[static_cast<size_t>(t)] * h)];
      for (int64_t i = 0; i < h; ++i) x[static_cast<size_t>(t * h + i)] = row[i] * embed_scale;
    }
    for (int64_t l = 0; l < hp_.num_hidden_layers; ++l) layer_forward(l, n, x);
    pos_ += n;
    std::vector<double> normed = norm(x, n, final_norm_);
    std::vector<double> logits = linear(normed, n, head(), nullptr, hp_.vocab_size, h);
    // Cohere2ForCausalLM: logits = lm_head(hidden) * logit_scale.
    // HyperCLOVAXForCausalLM: logits = lm_head(hidden) * logits_scaling (a multiplier).
    if (cohere2() || hyperclovax()) {
      for (double& v : logits) v *= hp_.logit_scale;
    }
    if (hp_.final_logit_softcap > 0.0) {
      for (double& v : logits) v = softcap(v, hp_.final_logit_softcap);
    }
    return logits;
  }

  /// Empties the KV caches.
  void reset() {
    pos_ = 0;
    for (Layer& l : layers_) {
      l.k_cache.clear();
      l.v_cache.clear();
    }
  }

  /// Tokens held in the cache.
  int64_t position() const { return pos_; }

 private:
  struct Layer {
    std::vector<double> in_norm, post_attn_norm, pre_ffn_norm, post_ffn_norm;
    std::vector<double> wq, wk, wv, wo, bq, bk, bv, bo, q_norm, k_norm;
    std::vector<double> w_gate, w_up, w_down, b_gate, b_up, b_down;
    std::vector<double> k_cache, v_cache;  // [positions, kv_dim]
  };

  explicit NaiveDecoder(const frontend::HParams& hp) : hp_(hp) {}

  bool gemma() const {
    return hp_.family == frontend::ModelFamily::kGemma2 ||
           hp_.family == frontend::ModelFamily::kGemma3;
  }
  bool phi3() const { return hp_.family == frontend::ModelFamily::kPhi3; }
  bool exaone4() const { return hp_.family == frontend::ModelFamily::kExaone4; }
  /// Cohere2: LayerNorm without bias, one input norm for the parallel attention and MLP,
  /// interleaved RoPE on sliding layers only, scaled logits.
  bool cohere2() const { return hp_.family == frontend::ModelFamily::kCohere2; }
  /// HyperCLOVAX: Granite's μP multipliers (embedding, attention, residual, logits) and, with
  /// use_post_norm, Peri-LN norms post_norm1 / post_norm2 after attention and MLP.
  bool hyperclovax() const { return hp_.family == frontend::ModelFamily::kHyperClovax; }
  /// Norms after attention and MLP: Gemma's sandwich, EXAONE 4's (Olmo2's) post-only,
  /// HyperCLOVAX's Peri-LN (use_post_norm).
  bool post_norms() const { return gemma() || exaone4() || (hyperclovax() && hp_.post_norms); }
  /// HyperCLOVAXDecoderLayer: residual + hidden_states * residual_multiplier.
  double residual_multiplier() const { return hyperclovax() ? hp_.residual_multiplier : 1.0; }

  /// Whether layer `l` applies RoPE: SmolLM3Attention `if self.use_rope` (no_rope_layers);
  /// Exaone4Attention `if self.sliding_window is None or self.is_sliding` (a model with no
  /// sliding layer is taken as one without a window); every other family always.
  bool rope_on(int64_t l) const {
    const auto& layers = hp_.layers;
    if (hp_.family == frontend::ModelFamily::kSmolLM3)
      return layers[static_cast<size_t>(l)].use_rope;
    // Cohere2Attention: `if self.sliding_window is not None` (RoPE on sliding layers only).
    if (cohere2()) return layers[static_cast<size_t>(l)].sliding_window > 0;
    if (!exaone4()) return true;
    const bool any_sliding = std::any_of(layers.begin(), layers.end(),
                                         [](const auto& la) { return la.sliding_window > 0; });
    return !any_sliding || layers[static_cast<size_t>(l)].sliding_window > 0;
  }
  const std::vector<double>& head() const { return lm_head_.empty() ? embed_ : lm_head_; }

  static Status fetch(const HfWeightFn& weights, const std::string& name, int64_t size,
                      std::vector<double>* out) {
    std::vector<float> v = weights(name);
    if (static_cast<int64_t>(v.size()) != size) {
      return invalid_argument("naive decoder: tensor ", name, " has ", v.size(),
                              " elements, expected ", size);
    }
    out->assign(v.begin(), v.end());
    return ok_status();
  }

  /// EXAONE 3.x (remote modeling_exaone.py): the Llama block under GPT-2-style names —
  /// transformer.wte / h.N.ln_1 / attn.attention.{q,k,v,out}_proj / ln_2 /
  /// mlp.c_fc_0 (gate), c_fc_1 (up), c_proj (down) / transformer.ln_f; no biases.
  Status load_exaone(const HfWeightFn& w) {
    const int64_t h = hp_.hidden_size, inter = hp_.intermediate_size, hd = hp_.head_dim;
    const int64_t qd = hp_.num_attention_heads * hd, kvd = hp_.num_key_value_heads * hd;
    QBC_RETURN_IF_ERROR(fetch(w, "transformer.wte.weight", hp_.vocab_size * h, &embed_));
    QBC_RETURN_IF_ERROR(fetch(w, "transformer.ln_f.weight", h, &final_norm_));
    if (!hp_.tie_word_embeddings) {
      QBC_RETURN_IF_ERROR(fetch(w, "lm_head.weight", hp_.vocab_size * h, &lm_head_));
    }
    layers_.resize(static_cast<size_t>(hp_.num_hidden_layers));
    for (int64_t i = 0; i < hp_.num_hidden_layers; ++i) {
      Layer& L = layers_[static_cast<size_t>(i)];
      const std::string p = "transformer.h." + std::to_string(i) + ".";
      const std::string a = p + "attn.attention.", m = p + "mlp.";
      QBC_RETURN_IF_ERROR(fetch(w, p + "ln_1.weight", h, &L.in_norm));
      QBC_RETURN_IF_ERROR(fetch(w, p + "ln_2.weight", h, &L.post_attn_norm));  // before the MLP
      QBC_RETURN_IF_ERROR(fetch(w, a + "q_proj.weight", qd * h, &L.wq));
      QBC_RETURN_IF_ERROR(fetch(w, a + "k_proj.weight", kvd * h, &L.wk));
      QBC_RETURN_IF_ERROR(fetch(w, a + "v_proj.weight", kvd * h, &L.wv));
      QBC_RETURN_IF_ERROR(fetch(w, a + "out_proj.weight", h * qd, &L.wo));
      QBC_RETURN_IF_ERROR(fetch(w, m + "c_fc_0.weight", inter * h, &L.w_gate));
      QBC_RETURN_IF_ERROR(fetch(w, m + "c_fc_1.weight", inter * h, &L.w_up));
      QBC_RETURN_IF_ERROR(fetch(w, m + "c_proj.weight", h * inter, &L.w_down));
    }
    return ok_status();
  }

  Status load(const HfWeightFn& w) {
    using frontend::ModelFamily;
    if (hp_.family == ModelFamily::kExaone) return load_exaone(w);
    const int64_t h = hp_.hidden_size, inter = hp_.intermediate_size, hd = hp_.head_dim;
    const int64_t qd = hp_.num_attention_heads * hd, kvd = hp_.num_key_value_heads * hd;
    QBC_RETURN_IF_ERROR(fetch(w, "model.embed_tokens.weight", hp_.vocab_size * h, &embed_));
    QBC_RETURN_IF_ERROR(fetch(w, "model.norm.weight", h, &final_norm_));
    if (!hp_.tie_word_embeddings) {
      QBC_RETURN_IF_ERROR(fetch(w, "lm_head.weight", hp_.vocab_size * h, &lm_head_));
    }
    // Which projections carry a bias, per HF family: Qwen2 q/k/v always (o never); Mistral and
    // Phi3 none; Llama, Qwen3 and Gemma q/k/v/o when `attention_bias`; Llama's MLP when
    // `mlp_bias`.
    const ModelFamily fam = hp_.family;
    const bool qkv_bias = fam == ModelFamily::kQwen2 ||
                          (hp_.attention_bias && fam != ModelFamily::kMistral && !phi3());
    const bool o_bias =
        hp_.attention_bias && fam != ModelFamily::kQwen2 && fam != ModelFamily::kMistral && !phi3();
    const bool mlp_bias = (fam == ModelFamily::kLlama || fam == ModelFamily::kSmolLM3 ||
                           fam == ModelFamily::kHyperClovax) &&
                          hp_.mlp_bias;
    const bool qk_norm =
        fam == ModelFamily::kQwen3 || fam == ModelFamily::kGemma3 || fam == ModelFamily::kExaone4;
    layers_.resize(static_cast<size_t>(hp_.num_hidden_layers));
    for (int64_t i = 0; i < hp_.num_hidden_layers; ++i) {
      Layer& L = layers_[static_cast<size_t>(i)];
      const std::string p = "model.layers." + std::to_string(i) + ".";
      const std::string a = p + "self_attn.", m = p + "mlp.";
      // Exaone4DecoderLayer (Olmo2's) has no norm before attention or the MLP.
      if (!exaone4()) QBC_RETURN_IF_ERROR(fetch(w, p + "input_layernorm.weight", h, &L.in_norm));
      if (!cohere2()) {  // Cohere2DecoderLayer has input_layernorm only
        QBC_RETURN_IF_ERROR(fetch(w, p + "post_attention_layernorm.weight", h, &L.post_attn_norm));
      }
      if (gemma()) {
        QBC_RETURN_IF_ERROR(fetch(w, p + "pre_feedforward_layernorm.weight", h, &L.pre_ffn_norm));
      }
      if (hyperclovax() && post_norms()) {
        QBC_RETURN_IF_ERROR(fetch(w, p + "post_norm1.weight", h, &L.pre_ffn_norm));
        QBC_RETURN_IF_ERROR(fetch(w, p + "post_norm2.weight", h, &L.post_ffn_norm));
      } else if (post_norms()) {
        QBC_RETURN_IF_ERROR(fetch(w, p + "post_feedforward_layernorm.weight", h, &L.post_ffn_norm));
      }
      if (phi3()) {
        // Phi3 qkv_proj rows: [q (H·d) | k (KV·d) | v (KV·d)].
        std::vector<double> qkv;
        QBC_RETURN_IF_ERROR(fetch(w, a + "qkv_proj.weight", (qd + 2 * kvd) * h, &qkv));
        L.wq.assign(qkv.begin(), qkv.begin() + qd * h);
        L.wk.assign(qkv.begin() + qd * h, qkv.begin() + (qd + kvd) * h);
        L.wv.assign(qkv.begin() + (qd + kvd) * h, qkv.end());
        // Phi3 gate_up_proj rows: [gate | up] (`gate, up = chunk(2)`).
        std::vector<double> gu;
        QBC_RETURN_IF_ERROR(fetch(w, m + "gate_up_proj.weight", 2 * inter * h, &gu));
        L.w_gate.assign(gu.begin(), gu.begin() + inter * h);
        L.w_up.assign(gu.begin() + inter * h, gu.end());
      } else {
        QBC_RETURN_IF_ERROR(fetch(w, a + "q_proj.weight", qd * h, &L.wq));
        QBC_RETURN_IF_ERROR(fetch(w, a + "k_proj.weight", kvd * h, &L.wk));
        QBC_RETURN_IF_ERROR(fetch(w, a + "v_proj.weight", kvd * h, &L.wv));
        QBC_RETURN_IF_ERROR(fetch(w, m + "gate_proj.weight", inter * h, &L.w_gate));
        QBC_RETURN_IF_ERROR(fetch(w, m + "up_proj.weight", inter * h, &L.w_up));
      }
      if (qkv_bias) {
        QBC_RETURN_IF_ERROR(fetch(w, a + "q_proj.bias", qd, &L.bq));
        QBC_RETURN_IF_ERROR(fetch(w, a + "k_proj.bias", kvd, &L.bk));
        QBC_RETURN_IF_ERROR(fetch(w, a + "v_proj.bias", kvd, &L.bv));
      }
      QBC_RETURN_IF_ERROR(fetch(w, a + "o_proj.weight", h * qd, &L.wo));
      if (o_bias) QBC_RETURN_IF_ERROR(fetch(w, a + "o_proj.bias", h, &L.bo));
      if (qk_norm) {
        QBC_RETURN_IF_ERROR(fetch(w, a + "q_norm.weight", hd, &L.q_norm));
        QBC_RETURN_IF_ERROR(fetch(w, a + "k_norm.weight", hd, &L.k_norm));
      }
      QBC_RETURN_IF_ERROR(fetch(w, m + "down_proj.weight", h * inter, &L.w_down));
      if (mlp_bias) {
        QBC_RETURN_IF_ERROR(fetch(w, m + "gate_proj.bias", inter, &L.b_gate));
        QBC_RETURN_IF_ERROR(fetch(w, m + "up_proj.bias", inter, &L.b_up));
        QBC_RETURN_IF_ERROR(fetch(w, m + "down_proj.bias", h, &L.b_down));
      }
    }
    return ok_status();
  }

  /// RMSNorm over rows of width `w.size()`: x / sqrt(mean(x²) + eps) · w (Gemma: · (1 + w)).
  std::vector<double> rms_norm(const std::vector<double>& x, int64_t rows,
                               const std::vector<double>& w) const {
    const int64_t d = static_cast<int64_t>(w.size());
    const double one = gemma() ? 1.0 : 0.0;
    std::vector<double> y(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      const double* xr = &x[static_cast<size_t>(r * d)];
      double ss = 0.0;
      for (int64_t i = 0; i < d; ++i) ss += xr[i] * xr[i];
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(d) + hp_.rms_norm_eps);
      for (int64_t i = 0; i < d; ++i) {
        y[static_cast<size_t>(r * d + i)] = xr[i] * inv * (one + w[static_cast<size_t>(i)]);
      }
    }
    return y;
  }

  /// Cohere2LayerNorm: (x − mean) / sqrt(mean((x − mean)²) + eps) · w, no bias.
  std::vector<double> layer_norm(const std::vector<double>& x, int64_t rows,
                                 const std::vector<double>& w) const {
    const int64_t d = static_cast<int64_t>(w.size());
    std::vector<double> y(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      const double* xr = &x[static_cast<size_t>(r * d)];
      double mean = 0.0, var = 0.0;
      for (int64_t i = 0; i < d; ++i) mean += xr[i];
      mean /= static_cast<double>(d);
      for (int64_t i = 0; i < d; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      var /= static_cast<double>(d);
      const double inv = 1.0 / std::sqrt(var + hp_.rms_norm_eps);
      for (int64_t i = 0; i < d; ++i) {
        y[static_cast<size_t>(r * d + i)] = (xr[i] - mean) * inv * w[static_cast<size_t>(i)];
      }
    }
    return y;
  }

  /// The family's norm over the hidden size.
  std::vector<double> norm(const std::vector<double>& x, int64_t rows,
                           const std::vector<double>& w) const {
    return cohere2() ? layer_norm(x, rows, w) : rms_norm(x, rows, w);
  }

  /// y = x Wᵀ + b for x [rows, in], W [out, in].
  static std::vector<double> linear(const std::vector<double>& x, int64_t rows,
                                    const std::vector<double>& w, const std::vector<double>* b,
                                    int64_t out, int64_t in) {
    std::vector<double> y(static_cast<size_t>(rows * out));
    for (int64_t r = 0; r < rows; ++r) {
      const double* xr = &x[static_cast<size_t>(r * in)];
      for (int64_t o = 0; o < out; ++o) {
        const double* wr = &w[static_cast<size_t>(o * in)];
        double s = (b != nullptr && !b->empty()) ? (*b)[static_cast<size_t>(o)] : 0.0;
        for (int64_t i = 0; i < in; ++i) s += wr[i] * xr[i];
        y[static_cast<size_t>(r * out + o)] = s;
      }
    }
    return y;
  }

  static double softcap(double v, double cap) { return cap * std::tanh(v / cap); }

  double activation(double g) const {
    if (hp_.activation == frontend::Activation::kSilu) return g / (1.0 + std::exp(-g));
    // gelu_pytorch_tanh.
    const double c = std::sqrt(2.0 / naive_internal::kPi);
    return 0.5 * g * (1.0 + std::tanh(c * (g + 0.044715 * g * g * g)));
  }

  /// Cohere2's RoPE: pair i is dims (2i, 2i+1) of each head (frequencies repeat_interleave'd,
  /// rotate_half on x[..., ::2] and x[..., 1::2]), in place.
  void apply_rope_interleaved(std::vector<double>& x, int64_t n, int64_t heads,
                              const NaiveRope& rope) const {
    const int64_t hd = hp_.head_dim, half = hp_.rotary_dim / 2;
    for (int64_t t = 0; t < n; ++t) {
      const double pos = static_cast<double>(pos_ + t);
      for (int64_t hh = 0; hh < heads; ++hh) {
        double* v = &x[static_cast<size_t>((t * heads + hh) * hd)];
        for (int64_t i = 0; i < half; ++i) {
          const double angle = pos * rope.inv_freq[static_cast<size_t>(i)];
          const double c = std::cos(angle) * rope.attention_factor;
          const double s = std::sin(angle) * rope.attention_factor;
          const double a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = a * c - b * s;
          v[2 * i + 1] = b * c + a * s;
        }
      }
    }
  }

  /// HF rotate_half RoPE on the first rotary_dim dims of each of `heads` heads, in place.
  void apply_rope(std::vector<double>& x, int64_t n, int64_t heads, const NaiveRope& rope) const {
    if (cohere2()) return apply_rope_interleaved(x, n, heads, rope);
    const int64_t hd = hp_.head_dim, half = hp_.rotary_dim / 2;
    for (int64_t t = 0; t < n; ++t) {
      const double pos = static_cast<double>(pos_ + t);
      for (int64_t hh = 0; hh < heads; ++hh) {
        double* v = &x[static_cast<size_t>((t * heads + hh) * hd)];
        for (int64_t i = 0; i < half; ++i) {
          const double angle = pos * rope.inv_freq[static_cast<size_t>(i)];
          const double c = std::cos(angle) * rope.attention_factor;
          const double s = std::sin(angle) * rope.attention_factor;
          const double a = v[i], b = v[i + half];
          v[i] = a * c - b * s;
          v[i + half] = b * c + a * s;
        }
      }
    }
  }

  void layer_forward(int64_t l, int64_t n, std::vector<double>& x) {
    Layer& L = layers_[static_cast<size_t>(l)];
    const int64_t h = hp_.hidden_size, hd = hp_.head_dim, inter = hp_.intermediate_size;
    const int64_t nh = hp_.num_attention_heads, nkv = hp_.num_key_value_heads;
    const int64_t qd = nh * hd, kvd = nkv * hd;

    // --- Attention ---------------------------------------------------------------------------
    std::vector<double> hn = exaone4() ? x : norm(x, n, L.in_norm);
    std::vector<double> q = linear(hn, n, L.wq, &L.bq, qd, h);
    std::vector<double> k = linear(hn, n, L.wk, &L.bk, kvd, h);
    std::vector<double> v = linear(hn, n, L.wv, &L.bv, kvd, h);
    if (!L.q_norm.empty()) {  // Qwen3 / Gemma3: per-head RMSNorm before RoPE.
      q = rms_norm(q, n * nh, L.q_norm);
      k = rms_norm(k, n * nkv, L.k_norm);
    }
    if (rope_on(l)) {
      const NaiveRope rope = naive_rope(hp_, l, pos_ + n);
      apply_rope(q, n, nh, rope);
      apply_rope(k, n, nkv, rope);
    }
    L.k_cache.insert(L.k_cache.end(), k.begin(), k.end());
    L.v_cache.insert(L.v_cache.end(), v.begin(), v.end());

    const int64_t window = hp_.layers[static_cast<size_t>(l)].sliding_window;
    const int64_t group = nh / nkv;
    std::vector<double> attn(static_cast<size_t>(n * qd), 0.0);
    std::vector<double> scores;
    for (int64_t t = 0; t < n; ++t) {
      const int64_t p = pos_ + t;
      // HF masks: causal j <= p; sliding window keeps j > p - window.
      const int64_t first = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
      for (int64_t hh = 0; hh < nh; ++hh) {
        const int64_t kh = hh / group;
        const double* qv = &q[static_cast<size_t>(t * qd + hh * hd)];
        scores.assign(static_cast<size_t>(p - first + 1), 0.0);
        double mx = -INFINITY;
        for (int64_t j = first; j <= p; ++j) {
          const double* kv = &L.k_cache[static_cast<size_t>(j * kvd + kh * hd)];
          double s = 0.0;
          for (int64_t i = 0; i < hd; ++i) s += qv[i] * kv[i];
          s *= hp_.query_scale;
          if (hp_.attn_logit_softcap > 0.0) s = softcap(s, hp_.attn_logit_softcap);
          scores[static_cast<size_t>(j - first)] = s;
          mx = std::max(mx, s);
        }
        double sum = 0.0;
        for (double& s : scores) sum += (s = std::exp(s - mx));
        double* out = &attn[static_cast<size_t>(t * qd + hh * hd)];
        for (int64_t j = first; j <= p; ++j) {
          const double wgt = scores[static_cast<size_t>(j - first)] / sum;
          const double* vv = &L.v_cache[static_cast<size_t>(j * kvd + kh * hd)];
          for (int64_t i = 0; i < hd; ++i) out[i] += wgt * vv[i];
        }
      }
    }
    std::vector<double> o = linear(attn, n, L.wo, &L.bo, h, qd);
    // HyperCLOVAX keeps post_attention_layernorm before the MLP; its post_norm1 is held in
    // pre_ffn_norm (load()).
    if (post_norms()) o = rms_norm(o, n, hyperclovax() ? L.pre_ffn_norm : L.post_attn_norm);
    const double r = residual_multiplier();
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i] * r;

    // --- MLP ---------------------------------------------------------------------------------
    // Cohere2: the MLP reads the same normed input (residual + attention + mlp, in that order).
    if (!cohere2())
      hn = exaone4() ? x : rms_norm(x, n, gemma() ? L.pre_ffn_norm : L.post_attn_norm);
    std::vector<double> g = linear(hn, n, L.w_gate, &L.b_gate, inter, h);
    const std::vector<double> u = linear(hn, n, L.w_up, &L.b_up, inter, h);
    for (size_t i = 0; i < g.size(); ++i) g[i] = activation(g[i]) * u[i];
    std::vector<double> mo = linear(g, n, L.w_down, &L.b_down, h, inter);
    if (post_norms()) mo = rms_norm(mo, n, L.post_ffn_norm);
    for (size_t i = 0; i < x.size(); ++i) x[i] += mo[i] * r;
  }

  frontend::HParams hp_;
  std::vector<double> embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  int64_t pos_ = 0;
};

}  // namespace qbc::ref::testing
