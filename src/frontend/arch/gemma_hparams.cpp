// config.json → HParams for Gemma2 and Gemma3 (text). Both use (1 + w) RMSNorm, embeddings
// scaled by √hidden, extra norms after attention and MLP, query_pre_attn_scalar, and
// interleaved sliding-window layers; Gemma3 adds q/k norms and a local RoPE base.
#include <cmath>
#include <vector>

#include "hparams_reader.h"

namespace qbc::frontend::hparams_internal {
namespace {

// A softcap key: absent → `absent_default`, null → 0 (disabled), else a positive number.
StatusOr<double> get_softcap(const ConfigReader& cfg, std::string_view key, double absent_default) {
  if (!cfg.object().contains(std::string(key))) return absent_default;
  QBC_ASSIGN_OR_RETURN(double v, cfg.get_double_or(key, 0.0));
  if (v < 0.0) return cfg.bad_value(key, "must be >= 0 or null");
  return v;
}

Status parse_gemma_common(const ConfigReader& cfg, const FamilyDefaults& d, HParams& hp) {
  QBC_RETURN_IF_ERROR(parse_common(cfg, d, hp));
  // Gemma reads hidden_activation; hidden_act is a legacy alias HF ignores.
  QBC_RETURN_IF_ERROR(parse_activation(cfg, "hidden_activation", "gelu_pytorch_tanh", hp));
  hp.qkv_bias = hp.o_bias = hp.attention_bias;
  hp.norm_style = NormStyle::kOnePlusWeight;
  hp.post_norms = true;
  hp.embedding_scale = std::sqrt(static_cast<double>(hp.hidden_size));
  QBC_ASSIGN_OR_RETURN(double scalar, cfg.get_double_or("query_pre_attn_scalar", 256.0));
  if (!(scalar > 0.0)) return cfg.bad_value("query_pre_attn_scalar", "must be positive");
  hp.query_scale = 1.0 / std::sqrt(scalar);
  return ok_status();
}

}  // namespace

Status parse_gemma2(const ConfigReader& cfg, HParams& hp) {
  FamilyDefaults d;
  d.tie_word_embeddings = true;
  d.max_position_embeddings = 8192;
  d.head_dim = 256;
  QBC_RETURN_IF_ERROR(parse_gemma_common(cfg, d, hp));
  QBC_ASSIGN_OR_RETURN(hp.attn_logit_softcap, get_softcap(cfg, "attn_logit_softcapping", 50.0));
  QBC_ASSIGN_OR_RETURN(hp.final_logit_softcap, get_softcap(cfg, "final_logit_softcapping", 30.0));
  QBC_ASSIGN_OR_RETURN(int64_t window, cfg.get_positive_or("sliding_window", 4096));
  // Gemma2DecoderLayer: even layers (0, 2, ...) slide, odd layers are global.
  std::vector<bool> sliding(hp.layers.size());
  for (size_t i = 0; i < sliding.size(); ++i) sliding[i] = i % 2 == 0;
  return apply_layer_types(cfg, window, sliding, hp);
}

Status parse_gemma3(const ConfigReader& cfg, HParams& hp) {
  FamilyDefaults d;
  d.tie_word_embeddings = true;
  d.rope_theta = 1'000'000.0;
  d.max_position_embeddings = 131072;
  d.head_dim = 256;
  QBC_RETURN_IF_ERROR(parse_gemma_common(cfg, d, hp));
  hp.qk_norm = true;
  QBC_ASSIGN_OR_RETURN(hp.attn_logit_softcap, get_softcap(cfg, "attn_logit_softcapping", 0.0));
  QBC_ASSIGN_OR_RETURN(hp.final_logit_softcap, get_softcap(cfg, "final_logit_softcapping", 0.0));
  QBC_ASSIGN_OR_RETURN(int64_t window, cfg.get_positive_or("sliding_window", 4096));
  QBC_ASSIGN_OR_RETURN(int64_t pattern, cfg.get_positive_or("sliding_window_pattern", 6));
  QBC_ASSIGN_OR_RETURN(double local_theta, cfg.get_double_or("rope_local_base_freq", 10000.0));
  if (!(local_theta > 0.0)) return cfg.bad_value("rope_local_base_freq", "must be positive");
  // Every `pattern`-th layer (1-based) is global; the others slide.
  std::vector<bool> sliding(hp.layers.size());
  for (size_t i = 0; i < sliding.size(); ++i) sliding[i] = (i + 1) % pattern != 0;
  QBC_RETURN_IF_ERROR(apply_layer_types(cfg, window, sliding, hp));
  // Local layers use rope_local_base_freq without scaling; rope_scaling is for global layers.
  for (auto& layer : hp.layers) {
    if (layer.sliding_window == 0) continue;
    layer.rope_theta = local_theta;
    layer.rope_scaled = false;
  }
  return ok_status();
}

}  // namespace qbc::frontend::hparams_internal
