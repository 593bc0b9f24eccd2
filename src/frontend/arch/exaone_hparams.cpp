// config.json → HParams for LG's EXAONE families.
//
// EXAONE 3.0/3.5 (`exaone`, remote code): the Llama block under GPT-2-style names, with its own
// keys num_layers, layer_norm_epsilon and activation_function, intermediate_size defaulting to
// 4 x hidden_size and tied embeddings by default (PretrainedConfig's default).
//
// EXAONE 4.0 (`exaone4`, transformers' Exaone4Config): RMSNorm on q and k per head, norms after
// attention and MLP instead of before (Olmo2's placement), and hybrid attention: layers slide
// per layer_types or sliding_window_pattern, and when a window is configured the global layers
// use no RoPE (Exaone4Attention: RoPE iff sliding_window is None or the layer slides).
#include <string>
#include <vector>

#include "hparams_reader.h"
#include "qbc/support/quote.h"

namespace qbc::frontend::hparams_internal {
namespace {

// Exaone4Config: an int pattern p makes layer i slide iff (i + 1) % p != 0; a string of 'L'
// (local) and 'G' (global) repeats from layer 0 and the last layer is always global (the
// documented meaning; HF itself reads a string pattern only through layer_types).
StatusOr<std::vector<bool>> exaone4_default_sliding(const ConfigReader& cfg, int64_t layers) {
  std::vector<bool> sliding(static_cast<size_t>(layers), false);
  const nlohmann::json* pattern = cfg.find("sliding_window_pattern");
  if (pattern != nullptr && pattern->is_string()) {
    const std::string s = pattern->get<std::string>();
    if (s.empty() || s.find_first_not_of("LG") != std::string::npos) {
      return cfg.bad_value("sliding_window_pattern",
                           quote_prefix(s) + " is not a string of 'L' and 'G'");
    }
    for (int64_t i = 0; i + 1 < layers; ++i) {
      sliding[static_cast<size_t>(i)] = s[static_cast<size_t>(i) % s.size()] == 'L';
    }
    return sliding;
  }
  QBC_ASSIGN_OR_RETURN(int64_t p, cfg.get_positive_or("sliding_window_pattern", 4));
  for (int64_t i = 0; i < layers; ++i) sliding[static_cast<size_t>(i)] = (i + 1) % p != 0;
  return sliding;
}

}  // namespace

Status parse_exaone(const ConfigReader& cfg, HParams& hp) {
  FamilyDefaults d;
  d.tie_word_embeddings = true;
  d.rms_norm_eps = 1e-5;
  d.intermediate_per_hidden = 4;
  d.layers_key = "num_layers";
  d.eps_key = "layer_norm_epsilon";
  QBC_RETURN_IF_ERROR(parse_common(cfg, d, hp));
  QBC_RETURN_IF_ERROR(parse_activation(cfg, "activation_function", "silu", hp));
  return ok_status();  // no biases anywhere (ExaoneAttention, ExaoneGatedMLP: bias=False)
}

Status parse_exaone4(const ConfigReader& cfg, HParams& hp) {
  FamilyDefaults d;
  d.rms_norm_eps = 1e-5;
  QBC_RETURN_IF_ERROR(parse_common(cfg, d, hp));
  QBC_RETURN_IF_ERROR(parse_activation(cfg, "hidden_act", "silu", hp));
  hp.qk_norm = true;
  hp.pre_norms = false;
  hp.post_norms = true;
  // Exaone4Config.sliding_window defaults to 4096; an explicit null disables windows.
  int64_t window = 4096;
  if (cfg.object().contains("sliding_window")) {
    QBC_ASSIGN_OR_RETURN(window, cfg.get_positive_or("sliding_window", 0));
  }
  std::vector<bool> sliding(hp.layers.size(), false);
  if (window > 0 && !cfg.has("layer_types")) {
    QBC_ASSIGN_OR_RETURN(sliding, exaone4_default_sliding(cfg, hp.num_hidden_layers));
  }
  QBC_RETURN_IF_ERROR(apply_layer_types(cfg, window, sliding, hp));
  for (LayerAttention& layer : hp.layers) layer.use_rope = window == 0 || layer.sliding_window > 0;
  return ok_status();
}

}  // namespace qbc::frontend::hparams_internal
