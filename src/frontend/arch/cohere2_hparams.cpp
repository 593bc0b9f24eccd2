// config.json → HParams for Cohere2 (`cohere2`, transformers' Cohere2Config; Command R7B).
//
// The block (modeling_cohere2.py): one LayerNorm without bias (`input_layernorm`, eps
// `layer_norm_eps`) feeds both attention and the gated SiLU MLP, whose outputs are added to the
// residual together; logits are lm_head(norm(x)) · logit_scale; embeddings are tied by default.
// Layers slide per layer_types or sliding_window_pattern (int p: layer i slides iff
// (i + 1) % p != 0, default 4); sliding layers apply RoPE to adjacent pairs (interleaved), global
// layers no RoPE at all.
#include <vector>

#include "hparams_reader.h"

namespace qbc::frontend::hparams_internal {

Status parse_cohere2(const ConfigReader& cfg, HParams& hp) {
  FamilyDefaults d;
  d.tie_word_embeddings = true;
  d.rms_norm_eps = 1e-5;
  d.max_position_embeddings = 8192;
  d.eps_key = "layer_norm_eps";
  QBC_RETURN_IF_ERROR(parse_common(cfg, d, hp));
  QBC_RETURN_IF_ERROR(parse_activation(cfg, "hidden_act", "silu", hp));
  if (hp.head_dim * hp.num_attention_heads != hp.hidden_size) {
    // Cohere2Config sets head_dim = hidden_size / num_attention_heads whatever the file says.
    return cfg.bad_value("head_dim", "Cohere2 needs head_dim x num_attention_heads == hidden_size");
  }
  if (hp.rope_scaling.type != RopeScalingType::kNone) {
    return cfg.bad_value("rope_scaling", "Cohere2 models are read without rope scaling");
  }
  hp.layer_norm = true;
  hp.parallel_block = true;
  hp.rope_interleaved = true;
  // Cohere2Attention: q/k/v/o all carry a bias iff attention_bias; the MLP never does.
  hp.qkv_bias = hp.attention_bias;
  hp.o_bias = hp.attention_bias;
  QBC_ASSIGN_OR_RETURN(hp.logit_scale, cfg.get_double_or("logit_scale", 0.0625));
  if (!(hp.logit_scale > 0.0)) return cfg.bad_value("logit_scale", "must be positive");
  // Cohere2Config.sliding_window defaults to 4096; an explicit null makes every layer global.
  int64_t window = 4096;
  if (cfg.object().contains("sliding_window")) {
    QBC_ASSIGN_OR_RETURN(window, cfg.get_positive_or("sliding_window", 0));
  }
  QBC_ASSIGN_OR_RETURN(const int64_t p, cfg.get_positive_or("sliding_window_pattern", 4));
  std::vector<bool> sliding(hp.layers.size(), false);
  for (size_t i = 0; i < sliding.size(); ++i) sliding[i] = (i + 1) % static_cast<size_t>(p) != 0;
  QBC_RETURN_IF_ERROR(apply_layer_types(cfg, window, sliding, hp));
  // Cohere2Attention applies RoPE iff the layer has a window.
  for (LayerAttention& layer : hp.layers) layer.use_rope = layer.sliding_window > 0;
  return ok_status();
}

}  // namespace qbc::frontend::hparams_internal
