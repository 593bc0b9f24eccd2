// config.json -> HParams for the language model of Qwen2-VL, Qwen2.5-VL and Qwen3-VL
// (Qwen2VLForConditionalGeneration, Qwen2_5_VLForConditionalGeneration,
// Qwen3VLForConditionalGeneration). Its decoder is Qwen2's
// (q/k/v biases, no o_proj bias, SwiGLU), with M-RoPE: `rope_scaling.mrope_section` splits the
// head_dim / 2 rotary frequencies among the temporal, height and width position streams
// (transformers' apply_multimodal_rotary_pos_emb). The text keys sit at the top of config.json
// (transformers < 4.53) or under `text_config`; parse_hparams merges the two first.
#include <algorithm>
#include <string>
#include <vector>

#include "hparams_reader.h"

namespace qbc::frontend::hparams_internal {
namespace {

// rope_scaling.mrope_section: three non-negative integers summing to head_dim / 2.
Status parse_mrope_section(const ConfigReader& cfg, HParams& hp) {
  if (!cfg.has("rope_scaling")) return cfg.missing("rope_scaling");
  QBC_ASSIGN_OR_RETURN(ConfigReader rs, cfg.child("rope_scaling"));
  const nlohmann::json* sec = rs.find("mrope_section");
  if (sec == nullptr) return rs.missing("mrope_section");
  if (!sec->is_array() || sec->size() != 3) {
    return rs.wrong_type("mrope_section", "a list of 3 integers (temporal, height, width)");
  }
  int64_t sum = 0;
  for (const nlohmann::json& v : *sec) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxModelDim) {
      return rs.wrong_type("mrope_section", "a list of 3 integers in [0, 2^20]");
    }
    hp.mrope_section.push_back(v.get<int64_t>());
    sum += v.get<int64_t>();
  }
  if (sum * 2 != hp.head_dim) {
    return rs.bad_value("mrope_section",
                        internal::concat("sums to ", sum, "; M-RoPE needs head_dim / 2 = ",
                                         hp.head_dim / 2, " (one entry per rotary frequency)"));
  }
  return ok_status();
}

// M-RoPE over the default frequencies (`family` names the models in the refusal of a scaled
// one), then its sections.
Status parse_mrope(const ConfigReader& cfg, const char* family, HParams& hp) {
  if (hp.rope_scaling.type != RopeScalingType::kNone) {
    return unimplemented(cfg.where("rope_scaling"), ": M-RoPE with ",
                         rope_scaling_name(hp.rope_scaling.type), " scaling (", family,
                         " models use the default frequencies)");
  }
  return parse_mrope_section(cfg, hp);
}

}  // namespace

Status parse_qwen2_vl(const ConfigReader& cfg, HParams& hp) {
  QBC_RETURN_IF_ERROR(parse_qwen2(cfg, hp));
  return parse_mrope(cfg, "Qwen2-VL", hp);
}

// Qwen3VLForConditionalGeneration: the decoder is Qwen3's (q/k RMSNorm, head_dim 128 by
// default) under `text_config`, with interleaved M-RoPE. transformers'
// Qwen3VLTextRotaryEmbedding always interleaves (it never reads
// `rope_scaling.mrope_interleaved`, which the published configs set to true) and takes
// mrope_section [24, 20, 20] when the config has none; so does this.
Status parse_qwen3_vl(const ConfigReader& cfg, HParams& hp) {
  QBC_RETURN_IF_ERROR(parse_qwen3(cfg, hp));
  hp.mrope_interleaved = true;
  if (cfg.has("rope_scaling")) {
    QBC_ASSIGN_OR_RETURN(ConfigReader rs, cfg.child("rope_scaling"));
    if (rs.find("mrope_section") != nullptr) return parse_mrope(cfg, "Qwen3-VL", hp);
  }
  if (hp.rope_scaling.type != RopeScalingType::kNone)
    return unimplemented(cfg.where("rope_scaling"), ": M-RoPE with ",
                         rope_scaling_name(hp.rope_scaling.type),
                         " scaling (Qwen3-VL models use the default frequencies)");
  hp.mrope_section = {24, 20, 20};
  if (hp.head_dim != 128)
    return invalid_argument(cfg.where("rope_scaling"),
                            ": no mrope_section, and transformers' default [24, 20, 20] needs "
                            "head_dim 128, not ",
                            hp.head_dim);
  return ok_status();
}

// DeepStack: one row input per tap of the tower (Qwen3VLVisionConfig's default has 3), each
// added after the decoder layer of its index in the list (Qwen3VLTextModel.forward).
Status read_deepstack_layers(const ConfigReader& top, HParams& hp) {
  if (!top.has("vision_config")) return ok_status();
  QBC_ASSIGN_OR_RETURN(ConfigReader v, top.child("vision_config"));
  const nlohmann::json* taps = v.find("deepstack_visual_indexes");
  if (taps != nullptr && !taps->is_array())
    return v.wrong_type("deepstack_visual_indexes", "a list of block indexes");
  const int64_t n = taps != nullptr ? static_cast<int64_t>(taps->size()) : 3;
  hp.deepstack_layers = std::min(n, hp.num_hidden_layers);
  return ok_status();
}

}  // namespace qbc::frontend::hparams_internal
