// config.json → HParams for SmolLM3: the Llama block with NoPE layers. HF's SmolLM3Config reads
// `no_rope_layers` (1 = RoPE, 0 = no position encoding), defaulting it to every
// `no_rope_layer_interval`-th layer (1-based) without RoPE; a layer slides only when
// use_sliding_window is set, sliding_window is given and its layer_types entry says so.
#include <vector>

#include "hparams_reader.h"

namespace qbc::frontend::hparams_internal {
namespace {

// SmolLM3Config.__post_init__: no_rope_layers[i] = (i + 1) % interval != 0 when absent.
StatusOr<std::vector<bool>> parse_rope_layers(const ConfigReader& cfg, int64_t layers) {
  std::vector<bool> rope(static_cast<size_t>(layers));
  const nlohmann::json* list = cfg.find("no_rope_layers");
  if (list == nullptr) {
    QBC_ASSIGN_OR_RETURN(int64_t interval, cfg.get_positive_or("no_rope_layer_interval", 4));
    for (int64_t i = 0; i < layers; ++i) rope[static_cast<size_t>(i)] = (i + 1) % interval != 0;
    return rope;
  }
  if (!list->is_array()) return cfg.wrong_type("no_rope_layers", "an array of 0/1 integers");
  if (static_cast<int64_t>(list->size()) != layers) {
    return cfg.bad_value(
        "no_rope_layers",
        internal::concat("has ", list->size(), " entries but num_hidden_layers is ", layers));
  }
  for (size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json& e = (*list)[i];
    if (e.is_boolean()) {
      rope[i] = e.get<bool>();
    } else if (e.is_number_integer() && (e.get<int64_t>() == 0 || e.get<int64_t>() == 1)) {
      rope[i] = e.get<int64_t>() == 1;
    } else {
      return cfg.wrong_type("no_rope_layers", "an array of 0/1 integers");
    }
  }
  return rope;
}

}  // namespace

Status parse_smollm3(const ConfigReader& cfg, HParams& hp) {
  FamilyDefaults d;
  d.tie_word_embeddings = true;
  d.rope_theta = 2'000'000.0;
  d.max_position_embeddings = 32768;
  QBC_RETURN_IF_ERROR(parse_common(cfg, d, hp));
  QBC_RETURN_IF_ERROR(parse_activation(cfg, "hidden_act", "silu", hp));
  QBC_ASSIGN_OR_RETURN(hp.mlp_bias, cfg.get_bool_or("mlp_bias", false));
  hp.qkv_bias = hp.o_bias = hp.attention_bias;
  QBC_ASSIGN_OR_RETURN(std::vector<bool> rope, parse_rope_layers(cfg, hp.num_hidden_layers));
  for (size_t i = 0; i < rope.size(); ++i) hp.layers[i].use_rope = rope[i];
  QBC_ASSIGN_OR_RETURN(bool use_sliding, cfg.get_bool_or("use_sliding_window", false));
  int64_t window = 0;
  if (use_sliding) {
    QBC_ASSIGN_OR_RETURN(window, cfg.get_positive_or("sliding_window", 0));
  }
  // Without layer_types, HF makes the NoPE layers slide (when a window is in force).
  std::vector<bool> sliding(rope.size());
  for (size_t i = 0; i < rope.size(); ++i) sliding[i] = window > 0 && !rope[i];
  return apply_layer_types(cfg, window, sliding, hp);
}

}  // namespace qbc::frontend::hparams_internal
