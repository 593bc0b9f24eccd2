// config.json → HParams for HyperCLOVAX (`hyperclovax`, transformers' HyperCLOVAXConfig, a
// GraniteConfig; HyperCLOVA X SEED Think 14B).
//
// The block (modeling_hyperclovax.py, Granite's with Peri-LN): Llama's pre-norm block where
//   embeddings  = embed_tokens(ids) · embedding_multiplier
//   attention   = softmax(q·kᵀ · attention_multiplier) v      (default head_dim^-½)
//   x           = x + residual_multiplier · [post_norm1](attn(input_layernorm(x)))
//   x           = x + residual_multiplier · [post_norm2](mlp(post_attention_layernorm(x)))
//   logits      = lm_head(norm(x)) · logits_scaling            (a multiplier, unlike Granite's)
// post_norm1/2 are RMSNorms present iff use_post_norm. A null multiplier means its neutral value.
#include <cmath>

#include "hparams_reader.h"

namespace qbc::frontend::hparams_internal {
namespace {

// A positive finite multiplier `key`, `fallback` when absent or null.
StatusOr<double> multiplier(const ConfigReader& cfg, std::string_view key, double fallback) {
  QBC_ASSIGN_OR_RETURN(const double v, cfg.get_double_or(key, fallback));
  if (!(v > 0.0) || !std::isfinite(v)) return cfg.bad_value(key, "must be a positive number");
  return v;
}

}  // namespace

Status parse_hyperclovax(const ConfigReader& cfg, HParams& hp) {
  FamilyDefaults d;
  d.max_position_embeddings = 2048;
  QBC_RETURN_IF_ERROR(parse_common(cfg, d, hp));
  QBC_RETURN_IF_ERROR(parse_activation(cfg, "hidden_act", "silu", hp));
  if (hp.hidden_size % hp.num_attention_heads != 0) {
    // HyperCLOVAXConfig.validate_architecture.
    return cfg.bad_value("num_attention_heads", "must divide hidden_size (HyperCLOVAXConfig)");
  }
  // GraniteAttention / GraniteMLP: q/k/v/o biases iff attention_bias, MLP biases iff mlp_bias.
  QBC_ASSIGN_OR_RETURN(hp.mlp_bias, cfg.get_bool_or("mlp_bias", false));
  hp.qkv_bias = hp.o_bias = hp.attention_bias;
  QBC_ASSIGN_OR_RETURN(
      hp.query_scale,
      multiplier(cfg, "attention_multiplier", 1.0 / std::sqrt(static_cast<double>(hp.head_dim))));
  QBC_ASSIGN_OR_RETURN(hp.embedding_scale, multiplier(cfg, "embedding_multiplier", 1.0));
  QBC_ASSIGN_OR_RETURN(hp.residual_multiplier, multiplier(cfg, "residual_multiplier", 1.0));
  QBC_ASSIGN_OR_RETURN(hp.logit_scale, multiplier(cfg, "logits_scaling", 1.0));
  QBC_ASSIGN_OR_RETURN(hp.post_norms, cfg.get_bool_or("use_post_norm", false));
  return ok_status();
}

}  // namespace qbc::frontend::hparams_internal
