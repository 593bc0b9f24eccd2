// config.json → HParams for the Llama-structured families: Llama, Mistral, Qwen2, Qwen3, Phi3.
// They share the pre-norm block (input_layernorm → attention → post_attention_layernorm → MLP)
// and differ only in flags: biases, q/k norms, sliding windows, fused projections.
#include <cmath>
#include <vector>

#include "hparams_reader.h"

namespace qbc::frontend::hparams_internal {
namespace {

// Qwen2/Qwen3: windows apply only with use_sliding_window, to layers >= max_window_layers.
Status parse_qwen_windows(const ConfigReader& cfg, HParams& hp) {
  QBC_ASSIGN_OR_RETURN(bool use_sliding, cfg.get_bool_or("use_sliding_window", false));
  QBC_ASSIGN_OR_RETURN(int64_t max_window_layers, cfg.get_int_or("max_window_layers", 28));
  if (max_window_layers < 0) return cfg.bad_value("max_window_layers", "must be >= 0");
  // HF sets sliding_window = None unless use_sliding_window; then no layer slides.
  int64_t window = 0;
  if (use_sliding) {
    QBC_ASSIGN_OR_RETURN(window, cfg.get_positive_or("sliding_window", 4096));
  }
  std::vector<bool> sliding(static_cast<size_t>(hp.num_hidden_layers));
  for (int64_t i = 0; i < hp.num_hidden_layers; ++i) sliding[i] = i >= max_window_layers;
  return apply_layer_types(cfg, window, sliding, hp);
}

// Mistral/Phi3: one window (or none) for every layer. `absent_default` applies when the key is
// missing entirely; an explicit null means no window.
Status parse_uniform_window(const ConfigReader& cfg, int64_t absent_default, HParams& hp) {
  int64_t window = absent_default;
  if (cfg.object().contains("sliding_window")) {
    QBC_ASSIGN_OR_RETURN(window, cfg.get_positive_or("sliding_window", 0));
  }
  return apply_layer_types(cfg, window, std::vector<bool>(hp.layers.size(), true), hp);
}

}  // namespace

Status parse_llama(const ConfigReader& cfg, HParams& hp) {
  FamilyDefaults d;
  d.max_position_embeddings = 2048;
  QBC_RETURN_IF_ERROR(parse_common(cfg, d, hp));
  QBC_RETURN_IF_ERROR(parse_activation(cfg, "hidden_act", "silu", hp));
  QBC_ASSIGN_OR_RETURN(hp.mlp_bias, cfg.get_bool_or("mlp_bias", false));
  hp.qkv_bias = hp.o_bias = hp.attention_bias;
  return ok_status();
}

Status parse_mistral(const ConfigReader& cfg, HParams& hp) {
  FamilyDefaults d;
  d.max_position_embeddings = 4096 * 32;
  QBC_RETURN_IF_ERROR(parse_common(cfg, d, hp));
  QBC_RETURN_IF_ERROR(parse_activation(cfg, "hidden_act", "silu", hp));
  // MistralAttention hard-codes bias=False whatever attention_bias says.
  return parse_uniform_window(cfg, 4096, hp);
}

Status parse_qwen2(const ConfigReader& cfg, HParams& hp) {
  FamilyDefaults d;
  d.max_position_embeddings = 32768;
  QBC_RETURN_IF_ERROR(parse_common(cfg, d, hp));
  QBC_RETURN_IF_ERROR(parse_activation(cfg, "hidden_act", "silu", hp));
  hp.qkv_bias = true;  // Qwen2Attention: q/k/v always carry a bias, o_proj never does.
  hp.o_bias = false;
  return parse_qwen_windows(cfg, hp);
}

Status parse_qwen3(const ConfigReader& cfg, HParams& hp) {
  FamilyDefaults d;
  d.max_position_embeddings = 32768;
  d.head_dim = 128;  // Qwen3Config.head_dim defaults to 128, not hidden / heads.
  QBC_RETURN_IF_ERROR(parse_common(cfg, d, hp));
  QBC_RETURN_IF_ERROR(parse_activation(cfg, "hidden_act", "silu", hp));
  hp.qkv_bias = hp.o_bias = hp.attention_bias;
  hp.qk_norm = true;
  return parse_qwen_windows(cfg, hp);
}

Status parse_phi3(const ConfigReader& cfg, HParams& hp) {
  FamilyDefaults d;
  d.rms_norm_eps = 1e-5;
  d.max_position_embeddings = 4096;
  QBC_RETURN_IF_ERROR(parse_common(cfg, d, hp));
  QBC_RETURN_IF_ERROR(parse_activation(cfg, "hidden_act", "silu", hp));
  hp.fused_qkv = true;
  hp.fused_gate_up = true;
  QBC_ASSIGN_OR_RETURN(double partial, cfg.get_double_or("partial_rotary_factor", 1.0));
  if (!(partial > 0.0 && partial <= 1.0)) {
    return cfg.bad_value("partial_rotary_factor", "must be in (0, 1]");
  }
  hp.rotary_dim = static_cast<int64_t>(std::floor(hp.head_dim * partial));
  if (hp.rotary_dim <= 0 || hp.rotary_dim % 2 != 0) {
    return cfg.bad_value("partial_rotary_factor",
                         internal::concat("gives an odd or empty rotary dim ", hp.rotary_dim));
  }
  const RopeScaling& rs = hp.rope_scaling;
  if (rs.type == RopeScalingType::kLongRope) {
    const size_t half = static_cast<size_t>(hp.rotary_dim / 2);
    if (rs.short_factor.size() != half || rs.long_factor.size() != half) {
      return cfg.bad_value("rope_scaling",
                           internal::concat("longrope short_factor/long_factor need ", half,
                                            " entries (rotary_dim / 2), got ",
                                            rs.short_factor.size(), "/", rs.long_factor.size()));
    }
  }
  return parse_uniform_window(cfg, 0, hp);
}

}  // namespace qbc::frontend::hparams_internal
