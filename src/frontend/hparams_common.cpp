// The config.json fields shared by every family: sizes, heads, RoPE and its scaling, token ids,
// activation and HF `layer_types`. Defaults follow the HF `*Config` classes.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "hparams_reader.h"
#include "qbc/support/quote.h"

namespace qbc::frontend::hparams_internal {
namespace {

// HF's yarn_get_mscale: 0.1 · mscale · ln(scale) + 1, or 1 when the scale does not extend.
double yarn_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

StatusOr<std::vector<double>> get_double_list(const ConfigReader& cfg, std::string_view key) {
  const nlohmann::json* v = cfg.find(key);
  if (v == nullptr) return cfg.missing(key);
  if (!v->is_array()) return cfg.wrong_type(key, "an array of numbers");
  std::vector<double> out;
  out.reserve(v->size());
  for (const auto& e : *v) {
    if (!e.is_number()) return cfg.wrong_type(key, "an array of numbers");
    out.push_back(e.get<double>());
  }
  return out;
}

Status parse_token_ids(const ConfigReader& cfg, HParams& hp) {
  if (cfg.has("bos_token_id")) {
    QBC_ASSIGN_OR_RETURN(hp.bos_token_id, cfg.get_int("bos_token_id"));
  }
  const nlohmann::json* eos = cfg.find("eos_token_id");
  if (eos == nullptr) return ok_status();
  if (!eos->is_array()) {
    QBC_ASSIGN_OR_RETURN(int64_t id, cfg.get_int("eos_token_id"));
    hp.eos_token_ids = {id};
    return ok_status();
  }
  for (const auto& e : *eos) {
    if (!e.is_number_integer()) {
      return cfg.wrong_type("eos_token_id", "an integer or a list of integers");
    }
    hp.eos_token_ids.push_back(e.get<int64_t>());
  }
  return ok_status();
}

}  // namespace

Status parse_common(const ConfigReader& cfg, const FamilyDefaults& defaults, HParams& hp) {
  // Every size is bounded (hparams.h) before anything is derived from or allocated for it.
  QBC_ASSIGN_OR_RETURN(hp.vocab_size, cfg.get_bounded("vocab_size", kMaxVocab));
  QBC_ASSIGN_OR_RETURN(hp.hidden_size, cfg.get_bounded("hidden_size", kMaxModelDim));
  if (defaults.intermediate_per_hidden > 0 && !cfg.has("intermediate_size")) {
    hp.intermediate_size = defaults.intermediate_per_hidden * hp.hidden_size;
    if (hp.intermediate_size > kMaxModelDim) {
      return cfg.bad_value("hidden_size", internal::concat("gives a default intermediate_size ",
                                                           hp.intermediate_size,
                                                           " above qbc's limit of ", kMaxModelDim));
    }
  } else {
    QBC_ASSIGN_OR_RETURN(hp.intermediate_size, cfg.get_bounded("intermediate_size", kMaxModelDim));
  }
  QBC_ASSIGN_OR_RETURN(hp.num_hidden_layers, cfg.get_bounded(defaults.layers_key, kMaxLayers));
  QBC_ASSIGN_OR_RETURN(hp.num_attention_heads, cfg.get_bounded("num_attention_heads", kMaxHeads));
  QBC_ASSIGN_OR_RETURN(hp.num_key_value_heads, cfg.get_bounded_or("num_key_value_heads",
                                                                  hp.num_attention_heads, kMaxHeads));
  if (hp.num_attention_heads % hp.num_key_value_heads != 0) {
    return cfg.bad_value("num_key_value_heads",
                         internal::concat(hp.num_key_value_heads, " does not divide ",
                                          "num_attention_heads ", hp.num_attention_heads));
  }
  if (cfg.has("head_dim")) {
    QBC_ASSIGN_OR_RETURN(hp.head_dim, cfg.get_bounded("head_dim", kMaxModelDim));
  } else if (defaults.head_dim > 0) {
    hp.head_dim = defaults.head_dim;
  } else {
    if (hp.hidden_size % hp.num_attention_heads != 0) {
      return cfg.bad_value(
          "num_attention_heads",
          internal::concat(hp.num_attention_heads, " does not divide ", "hidden_size ",
                           hp.hidden_size, " and head_dim is absent"));
    }
    hp.head_dim = hp.hidden_size / hp.num_attention_heads;
  }
  // heads x head_dim <= 2^12 x 2^20 cannot overflow; the product is bounded like a dimension.
  if (hp.num_attention_heads * hp.head_dim > kMaxModelDim) {
    return cfg.bad_value("num_attention_heads",
                         internal::concat(hp.num_attention_heads, " heads of head_dim ",
                                          hp.head_dim, " exceed qbc's limit of ", kMaxModelDim,
                                          " for the query width"));
  }
  hp.rotary_dim = hp.head_dim;
  QBC_ASSIGN_OR_RETURN(hp.max_position_embeddings,
                       cfg.get_bounded_or("max_position_embeddings",
                                          defaults.max_position_embeddings, kMaxPositions));
  QBC_ASSIGN_OR_RETURN(hp.rms_norm_eps, cfg.get_double_or(defaults.eps_key, defaults.rms_norm_eps));
  if (!(hp.rms_norm_eps > 0.0)) return cfg.bad_value(defaults.eps_key, "must be positive");
  QBC_ASSIGN_OR_RETURN(hp.rope_theta, cfg.get_double_or("rope_theta", defaults.rope_theta));
  if (!(hp.rope_theta > 0.0)) return cfg.bad_value("rope_theta", "must be positive");
  QBC_ASSIGN_OR_RETURN(hp.tie_word_embeddings,
                       cfg.get_bool_or("tie_word_embeddings", defaults.tie_word_embeddings));
  QBC_ASSIGN_OR_RETURN(hp.attention_bias, cfg.get_bool_or("attention_bias", false));
  QBC_RETURN_IF_ERROR(parse_token_ids(cfg, hp));
  // transformers >= 4.56 writes "dtype"; older versions write "torch_dtype".
  QBC_ASSIGN_OR_RETURN(hp.torch_dtype, cfg.get_string_or("torch_dtype", ""));
  if (hp.torch_dtype.empty()) {
    QBC_ASSIGN_OR_RETURN(hp.torch_dtype, cfg.get_string_or("dtype", ""));
  }
  hp.query_scale = 1.0 / std::sqrt(static_cast<double>(hp.head_dim));
  hp.layers.assign(static_cast<size_t>(hp.num_hidden_layers), LayerAttention{});
  QBC_RETURN_IF_ERROR(parse_rope_scaling(cfg, hp));
  for (auto& layer : hp.layers) {
    layer.rope_theta = hp.rope_theta;
    layer.rope_scaled = hp.rope_scaling.type != RopeScalingType::kNone;
  }
  return ok_status();
}

Status parse_rope_scaling(const ConfigReader& top, HParams& hp) {
  hp.rope_scaling = RopeScaling{};
  const nlohmann::json* raw = top.find("rope_scaling");
  if (raw == nullptr) return ok_status();
  QBC_ASSIGN_OR_RETURN(ConfigReader cfg, top.child("rope_scaling"));
  // HF reads "rope_type" and falls back to the legacy "type".
  const char* type_key = cfg.has("rope_type") ? "rope_type" : "type";
  if (!cfg.has(type_key)) return cfg.missing("rope_type");
  QBC_ASSIGN_OR_RETURN(std::string type, cfg.get_string_or(type_key, ""));
  RopeScaling& rs = hp.rope_scaling;
  const int64_t max_pos = hp.max_position_embeddings;
  // Qwen2(.5)-VL write "mrope"; HF's config class turns it into "default" (mrope_section is
  // read by parse_qwen2_vl).
  if (type == "default" || type == "mrope") {
    rs.type = RopeScalingType::kNone;
  } else if (type == "linear" || type == "dynamic") {
    rs.type = type == "linear" ? RopeScalingType::kLinear : RopeScalingType::kDynamic;
    QBC_ASSIGN_OR_RETURN(rs.factor, cfg.get_double("factor"));
    QBC_ASSIGN_OR_RETURN(rs.original_max_position_embeddings,
                         cfg.get_positive_or("original_max_position_embeddings", max_pos));
  } else if (type == "llama3") {
    rs.type = RopeScalingType::kLlama3;
    QBC_ASSIGN_OR_RETURN(rs.factor, cfg.get_double("factor"));
    QBC_ASSIGN_OR_RETURN(rs.low_freq_factor, cfg.get_double("low_freq_factor"));
    QBC_ASSIGN_OR_RETURN(rs.high_freq_factor, cfg.get_double("high_freq_factor"));
    QBC_ASSIGN_OR_RETURN(rs.original_max_position_embeddings,
                         cfg.get_positive("original_max_position_embeddings"));
    if (!(rs.high_freq_factor > rs.low_freq_factor)) {
      return cfg.bad_value("high_freq_factor", "must be greater than low_freq_factor");
    }
  } else if (type == "yarn") {
    rs.type = RopeScalingType::kYarn;
    QBC_ASSIGN_OR_RETURN(rs.factor, cfg.get_double("factor"));
    QBC_ASSIGN_OR_RETURN(rs.original_max_position_embeddings,
                         cfg.get_positive_or("original_max_position_embeddings", max_pos));
    QBC_ASSIGN_OR_RETURN(rs.beta_fast, cfg.get_double_or("beta_fast", 32.0));
    QBC_ASSIGN_OR_RETURN(rs.beta_slow, cfg.get_double_or("beta_slow", 1.0));
    QBC_ASSIGN_OR_RETURN(rs.mscale, cfg.get_double_or("mscale", 0.0));
    QBC_ASSIGN_OR_RETURN(rs.mscale_all_dim, cfg.get_double_or("mscale_all_dim", 0.0));
    if (cfg.has("attention_factor")) {
      QBC_ASSIGN_OR_RETURN(rs.attention_factor, cfg.get_double("attention_factor"));
    } else if (rs.mscale != 0.0 && rs.mscale_all_dim != 0.0) {
      rs.attention_factor =
          yarn_mscale(rs.factor, rs.mscale) / yarn_mscale(rs.factor, rs.mscale_all_dim);
    } else {
      rs.attention_factor = yarn_mscale(rs.factor, 1.0);
    }
  } else if (type == "longrope") {
    rs.type = RopeScalingType::kLongRope;
    QBC_ASSIGN_OR_RETURN(rs.short_factor, get_double_list(cfg, "short_factor"));
    QBC_ASSIGN_OR_RETURN(rs.long_factor, get_double_list(cfg, "long_factor"));
    // Phi3 keeps original_max_position_embeddings at the top level of config.json.
    int64_t original = 0;
    QBC_ASSIGN_OR_RETURN(original, top.get_positive_or("original_max_position_embeddings", 0));
    QBC_ASSIGN_OR_RETURN(rs.original_max_position_embeddings,
                         cfg.get_positive_or("original_max_position_embeddings", original));
    if (rs.original_max_position_embeddings == 0) {
      return top.missing("original_max_position_embeddings");
    }
    rs.factor = static_cast<double>(max_pos) / rs.original_max_position_embeddings;
    if (cfg.has("attention_factor")) {
      QBC_ASSIGN_OR_RETURN(rs.attention_factor, cfg.get_double("attention_factor"));
    } else if (rs.factor > 1.0) {
      rs.attention_factor = std::sqrt(
          1.0 + std::log(rs.factor) / std::log(double(rs.original_max_position_embeddings)));
    }
  } else {
    return cfg.bad_value(type_key, "unknown RoPE scaling type " + quote_prefix(type) +
                                       " (supported: default, linear, dynamic, yarn, llama3, "
                                       "longrope)");
  }
  if (rs.type != RopeScalingType::kNone && rs.type != RopeScalingType::kLongRope &&
      !(rs.factor >= 1.0)) {
    return cfg.bad_value("factor", "must be >= 1");
  }
  return ok_status();
}

Status parse_activation(const ConfigReader& cfg, std::string_view key, std::string_view fallback,
                        HParams& hp) {
  QBC_ASSIGN_OR_RETURN(std::string act, cfg.get_string_or(key, std::string(fallback)));
  if (act == "silu" || act == "swish") {
    hp.activation = Activation::kSilu;
  } else if (act == "gelu_pytorch_tanh" || act == "gelu_new" || act == "gelu_fast") {
    hp.activation = Activation::kGeluTanh;
  } else {
    return unimplemented(cfg.where(key), ": activation ", quote_prefix(act),
                         " is not supported (supported: silu, gelu_pytorch_tanh)");
  }
  return ok_status();
}

Status apply_layer_types(const ConfigReader& cfg, int64_t window,
                         const std::vector<bool>& default_sliding, HParams& hp) {
  std::vector<bool> sliding = default_sliding;
  if (const nlohmann::json* types = cfg.find("layer_types")) {
    if (!types->is_array()) return cfg.wrong_type("layer_types", "an array of strings");
    if (static_cast<int64_t>(types->size()) != hp.num_hidden_layers) {
      return cfg.bad_value("layer_types", internal::concat("has ", types->size(),
                                                           " entries but num_hidden_layers is ",
                                                           hp.num_hidden_layers));
    }
    for (size_t i = 0; i < types->size(); ++i) {
      const auto& t = (*types)[i];
      if (!t.is_string()) return cfg.wrong_type("layer_types", "an array of strings");
      const std::string s = t.get<std::string>();
      if (s != "sliding_attention" && s != "full_attention") {
        return cfg.bad_value("layer_types", "unknown layer type " + quote_prefix(s) +
                                                " (expected sliding_attention or "
                                                "full_attention)");
      }
      sliding[i] = s == "sliding_attention";
    }
  }
  for (size_t i = 0; i < hp.layers.size(); ++i) {
    hp.layers[i].sliding_window = sliding[i] ? window : 0;
  }
  return ok_status();
}

}  // namespace qbc::frontend::hparams_internal
