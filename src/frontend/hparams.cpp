// config.json → HParams: JSON parsing, architecture dispatch, unsupported-option checks and
// parameter counting. Per-family parsing lives in arch/*_hparams.cpp.
#include "qbc/frontend/hparams.h"

#include <fstream>
#include <sstream>
#include <string>

#include "hparams_reader.h"
#include "qbc/support/json_parse.h"
#include "qbc/support/quote.h"

namespace qbc::frontend {
namespace {

using hparams_internal::ConfigReader;
using ParseFn = Status (*)(const ConfigReader&, HParams&);

struct ArchEntry {
  std::string_view architecture;
  ModelFamily family;
  ParseFn parse;
  /// The `model_type` values HF pairs with the architecture (its config class's).
  std::vector<std::string_view> model_types;
};

const std::vector<ArchEntry>& arch_table() {
  namespace hi = hparams_internal;
  static const std::vector<ArchEntry> table = {
      {"LlamaForCausalLM", ModelFamily::kLlama, hi::parse_llama, {"llama"}},
      {"MistralForCausalLM", ModelFamily::kMistral, hi::parse_mistral, {"mistral"}},
      {"Qwen2ForCausalLM", ModelFamily::kQwen2, hi::parse_qwen2, {"qwen2"}},
      {"Qwen3ForCausalLM", ModelFamily::kQwen3, hi::parse_qwen3, {"qwen3"}},
      {"Qwen2VLForConditionalGeneration", ModelFamily::kQwen2, hi::parse_qwen2_vl, {"qwen2_vl"}},
      {"Qwen2_5_VLForConditionalGeneration",
       ModelFamily::kQwen2,
       hi::parse_qwen2_vl,
       {"qwen2_5_vl"}},
      {"Qwen3VLForConditionalGeneration", ModelFamily::kQwen3, hi::parse_qwen3_vl, {"qwen3_vl"}},
      {"LlavaForConditionalGeneration", ModelFamily::kLlama, hi::parse_llama, {"llava"}},
      {"Idefics3ForConditionalGeneration", ModelFamily::kLlama, hi::parse_llama, {"idefics3"}},
      {"SmolVLMForConditionalGeneration", ModelFamily::kLlama, hi::parse_llama, {"smolvlm"}},
      {"Gemma2ForCausalLM", ModelFamily::kGemma2, hi::parse_gemma2, {"gemma2"}},
      {"Gemma3ForCausalLM", ModelFamily::kGemma3, hi::parse_gemma3, {"gemma3_text", "gemma3"}},
      {"Gemma3ForConditionalGeneration", ModelFamily::kGemma3, hi::parse_gemma3, {"gemma3"}},
      {"Phi3ForCausalLM", ModelFamily::kPhi3, hi::parse_phi3, {"phi3"}},
      {"SmolLM3ForCausalLM", ModelFamily::kSmolLM3, hi::parse_smollm3, {"smollm3"}},
      {"ExaoneForCausalLM", ModelFamily::kExaone, hi::parse_exaone, {"exaone"}},
      {"Exaone4ForCausalLM", ModelFamily::kExaone4, hi::parse_exaone4, {"exaone4"}},
      {"Cohere2ForCausalLM", ModelFamily::kCohere2, hi::parse_cohere2, {"cohere2"}},
      {"HyperCLOVAXForCausalLM", ModelFamily::kHyperClovax, hi::parse_hyperclovax, {"hyperclovax"}},
  };
  return table;
}

// Vision-language model types (HF transformers' config classes): their language model
// sits next to an image encoder that qbc cannot import yet.
constexpr std::string_view kMultimodalTypes[] = {
    "llava",        "llava_next", "llava_next_video", "llava_onevision", "vipllava",
    "qwen2_vl",     "qwen2_5_vl", "qwen3_vl",         "mllama",          "paligemma",
    "idefics2",     "idefics3",   "smolvlm",          "internvl",        "mistral3",
    "pixtral",      "phi3_v",     "phi4_multimodal",  "gemma3n",         "llama4",
    "aria",         "molmo",      "kimi_vl",          "chameleon",       "blip-2",
    "instructblip", "fuyu",
};

bool is_multimodal_type(std::string_view type) {
  for (std::string_view t : kMultimodalTypes) {
    if (t == type) return true;
  }
  return false;
}

// Architectures users bring that qbc cannot import yet (HF config classes), with what stops them:
// mixture-of-experts routing has no MBLT form yet.
struct PlannedArch {
  std::string_view architecture;
  std::string_view model_type;
  std::string_view what;
};
constexpr PlannedArch kPlanned[] = {
    {"Qwen3MoeForCausalLM", "qwen3_moe", "a mixture-of-experts model"},
    {"GptOssForCausalLM", "gpt_oss", "a mixture-of-experts model"},
    {"MixtralForCausalLM", "mixtral", "a mixture-of-experts model"},
};

// A message naming the architecture when `arch` or `type` is one of kPlanned, else "".
std::string planned_message(std::string_view arch, std::string_view type) {
  for (const PlannedArch& p : kPlanned) {
    if (p.architecture != arch && p.model_type != type) continue;
    return internal::concat("architecture ", quote_prefix(std::string(arch)), " (model_type ",
                            quote_prefix(std::string(type)), ") is ", p.what, " (", p.model_type,
                            "): not yet supported; its support is planned");
  }
  return "";
}

constexpr const char* kMultimodalPlanned =
    "vision-language (multimodal) models cannot be imported yet; their support is planned";

// Keys that signal a model qbc cannot represent yet (mixture of experts). quantization_config is
// read by parse_prequant_config() (prequant_config.cpp).
constexpr std::string_view kUnsupportedKeys[] = {
    "num_local_experts",   "num_experts",           "n_routed_experts",
    "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
};

std::string supported_list() {
  std::string out;
  for (std::string_view a : supported_architectures()) {
    if (!out.empty()) out += ", ";
    out += a;
  }
  return out;
}

StatusOr<nlohmann::json> parse_json(std::string_view text, std::string_view source) {
  return parse_json_text(text, source);
}

Status check_unsupported_keys(const ConfigReader& cfg) {
  for (std::string_view key : kUnsupportedKeys) {
    const nlohmann::json* v = cfg.find(key);
    if (v == nullptr) continue;
    if (v->is_number() && v->get<double>() == 0.0) continue;
    return unimplemented(cfg.where(key),
                         ": not supported (mixture-of-experts models cannot be imported yet)");
  }
  return ok_status();
}

// Gemma3TextConfig defaults, applied under a multimodal config's (often sparse) text_config.
nlohmann::json gemma3_text_defaults() {
  return {{"vocab_size", 262208},    {"hidden_size", 2304},      {"intermediate_size", 9216},
          {"num_hidden_layers", 26}, {"num_attention_heads", 8}, {"num_key_value_heads", 4},
          {"head_dim", 256}};
}

// A VLM's text_config over the defaults of the config class HF builds it as (`defaults`): the
// keys a sparse text_config leaves out take that class's __init__ defaults. tie_word_embeddings
// and the dtype may sit at the top.
nlohmann::json nested_text_json(const nlohmann::json& root, const nlohmann::json& sub,
                                nlohmann::json defaults) {
  for (const char* key : {"tie_word_embeddings", "torch_dtype", "dtype"}) {
    if (root.contains(key)) defaults[key] = root[key];
  }
  defaults.update(sub);
  defaults.erase("architectures");
  defaults.erase("model_type");
  return defaults;
}

// LLaVA: LlavaConfig builds its text_config as a LlamaConfig (llava-1.5-7b-hf's text_config sets
// only vocab_size, max_position_embeddings and rms_norm_eps).
nlohmann::json llama_text_defaults() {
  return {{"vocab_size", 32000},        {"hidden_size", 4096},
          {"intermediate_size", 11008}, {"num_hidden_layers", 32},
          {"num_attention_heads", 32},  {"max_position_embeddings", 2048},
          {"rms_norm_eps", 1e-6},       {"rope_theta", 10000.0},
          {"hidden_act", "silu"},       {"tie_word_embeddings", false},
          {"bos_token_id", 1},          {"eos_token_id", 2}};
}

// LLaVA over Qwen2 (llava-interleave, LLaVA-OneVision): a text_config of model_type qwen2 is
// built as a Qwen2Config.
nlohmann::json qwen2_text_defaults() {
  return {{"vocab_size", 151936},
          {"hidden_size", 4096},
          {"intermediate_size", 22016},
          {"num_hidden_layers", 32},
          {"num_attention_heads", 32},
          {"num_key_value_heads", 32},
          {"max_position_embeddings", 32768},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 10000.0},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", false}};
}

// Qwen2(.5)-VL: the text keys at the top of config.json (transformers < 4.53), overridden by
// `text_config` where a newer version nests them; the vision part is read elsewhere.
nlohmann::json qwen_vl_text_json(const nlohmann::json& root) {
  nlohmann::json text = root;
  text.erase("vision_config");
  text.erase("text_config");
  if (const auto it = root.find("text_config"); it != root.end() && it->is_object())
    text.update(*it);
  return text;
}

// `model_type` must be one HF pairs with the architecture: a config whose two keys disagree
// (a llava model_type over LlamaForCausalLM) is refused rather than guessed at. A config
// without model_type is read by its architecture alone.
Status check_model_type(const ConfigReader& top, const ArchEntry& e) {
  const nlohmann::json* raw = top.find("model_type");
  if (raw == nullptr) return ok_status();
  QBC_ASSIGN_OR_RETURN(std::string type, top.get_string_or("model_type", ""));
  for (std::string_view t : e.model_types) {
    if (t == type) return ok_status();
  }
  std::string expected;
  for (std::string_view t : e.model_types)
    expected += (expected.empty() ? "'" : " or '") + std::string(t) + "'";
  std::string msg = ": " + quote_prefix(type) + " does not match architectures " +
                    quote_prefix(std::string(e.architecture)) +
                    " (which HF pairs with model_type " + expected +
                    "); qbc does not guess which of the two is right";
  if (is_multimodal_type(type)) msg += std::string("; ") + kMultimodalPlanned;
  return unimplemented(top.where("model_type"), msg);
}

StatusOr<std::string> get_architecture(const ConfigReader& top) {
  const nlohmann::json* archs = top.find("architectures");
  if (archs == nullptr) return top.missing("architectures");
  if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
    return top.wrong_type("architectures", "a non-empty array of strings");
  }
  return (*archs)[0].get<std::string>();
}

}  // namespace

std::string_view family_name(ModelFamily family) {
  switch (family) {
    case ModelFamily::kLlama:
      return "llama";
    case ModelFamily::kMistral:
      return "mistral";
    case ModelFamily::kQwen2:
      return "qwen2";
    case ModelFamily::kQwen3:
      return "qwen3";
    case ModelFamily::kGemma2:
      return "gemma2";
    case ModelFamily::kGemma3:
      return "gemma3";
    case ModelFamily::kPhi3:
      return "phi3";
    case ModelFamily::kSmolLM3:
      return "smollm3";
    case ModelFamily::kExaone:
      return "exaone";
    case ModelFamily::kExaone4:
      return "exaone4";
    case ModelFamily::kCohere2:
      return "cohere2";
    case ModelFamily::kHyperClovax:
      return "hyperclovax";
  }
  return "unknown";
}

std::string_view rope_scaling_name(RopeScalingType type) {
  switch (type) {
    case RopeScalingType::kNone:
      return "none";
    case RopeScalingType::kLinear:
      return "linear";
    case RopeScalingType::kDynamic:
      return "dynamic";
    case RopeScalingType::kYarn:
      return "yarn";
    case RopeScalingType::kLlama3:
      return "llama3";
    case RopeScalingType::kLongRope:
      return "longrope";
  }
  return "unknown";
}

const std::vector<std::string_view>& supported_architectures() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> out;
    for (const ArchEntry& e : arch_table()) out.push_back(e.architecture);
    return out;
  }();
  return names;
}

StatusOr<HParams> parse_hparams(std::string_view json_text, std::string_view source_view) {
  const std::string source(source_view);
  QBC_ASSIGN_OR_RETURN(nlohmann::json root, parse_json(json_text, source));
  if (!root.is_object()) return invalid_argument(source, ": expected a JSON object at the top");
  const ConfigReader top(root, source);
  QBC_ASSIGN_OR_RETURN(std::string arch, get_architecture(top));
  const ArchEntry* entry = nullptr;
  for (const ArchEntry& e : arch_table()) {
    if (e.architecture == arch) entry = &e;
  }
  std::string type;
  if (const nlohmann::json* t = top.find("model_type"); t != nullptr && t->is_string())
    type = t->get<std::string>();
  if (std::string planned = planned_message(arch, type); !planned.empty()) {
    return unimplemented(top.where("architectures"), ": ", planned);
  }
  if (entry == nullptr) {
    return unimplemented(top.where("architectures"), ": architecture ", quote_prefix(arch),
                         " is not supported (supported: ", supported_list(), ")",
                         is_multimodal_type(type) ? std::string("; ") + kMultimodalPlanned : "");
  }
  QBC_RETURN_IF_ERROR(check_model_type(top, *entry));

  // A multimodal config nests the language model under text_config; token ids may stay on top.
  nlohmann::json text = root;
  std::string prefix;
  auto parse = entry->parse;
  ModelFamily family = entry->family;
  if (entry->architecture == "Gemma3ForConditionalGeneration") {
    QBC_ASSIGN_OR_RETURN(ConfigReader sub, top.child("text_config"));
    text = gemma3_text_defaults();
    text.update(sub.object());
    for (const char* key : {"bos_token_id", "eos_token_id", "torch_dtype", "dtype"}) {
      if (!text.contains(key) && root.contains(key)) text[key] = root[key];
    }
    prefix = "text_config.";
  } else if (entry->parse == hparams_internal::parse_qwen2_vl ||
             entry->parse == hparams_internal::parse_qwen3_vl) {
    text = qwen_vl_text_json(root);
  } else if (entry->architecture == "LlavaForConditionalGeneration" ||
             entry->architecture == "Idefics3ForConditionalGeneration" ||
             entry->architecture == "SmolVLMForConditionalGeneration") {
    // Idefics3Config and SmolVLMConfig build their text_config as a LlamaConfig too.
    QBC_ASSIGN_OR_RETURN(ConfigReader sub, top.child("text_config"));
    QBC_ASSIGN_OR_RETURN(const std::string text_type, sub.get_string_or("model_type", "llama"));
    const bool llava = entry->architecture == "LlavaForConditionalGeneration";
    if (llava && text_type == "qwen2") {
      text = nested_text_json(root, sub.object(), qwen2_text_defaults());
      parse = hparams_internal::parse_qwen2;
      family = ModelFamily::kQwen2;
    } else if (text_type != "llama") {
      return unimplemented(sub.where("model_type"), ": a ", entry->model_types[0],
                           " language model of type ", quote_prefix(text_type),
                           llava ? " (llama and qwen2 are read)" : " (only llama is read)");
    } else {
      text = nested_text_json(root, sub.object(), llama_text_defaults());
    }
    prefix = "text_config.";
  }
  const ConfigReader cfg(text, source, prefix);
  QBC_RETURN_IF_ERROR(check_unsupported_keys(cfg));

  HParams hp;
  hp.architecture = arch;
  hp.family = family;
  QBC_RETURN_IF_ERROR(parse(cfg, hp));
  if (entry->architecture == "Gemma3ForConditionalGeneration") {
    QBC_ASSIGN_OR_RETURN(hp.image_span_tokens,
                         top.get_bounded_or("mm_tokens_per_image", 256, int64_t{1} << 20));
    if (hp.image_span_tokens < 1) return top.bad_value("mm_tokens_per_image", "must be at least 1");
  }
  if (entry->parse == hparams_internal::parse_qwen3_vl)
    QBC_RETURN_IF_ERROR(hparams_internal::read_deepstack_layers(top, hp));
  return hp;
}

StatusOr<HParams> load_hparams(const std::filesystem::path& config_path) {
  std::ifstream in(config_path, std::ios::binary);
  if (!in) return not_found(config_path.string(), ": cannot open config file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return data_loss(config_path.string(), ": read error");
  return parse_hparams(ss.str(), config_path.string());
}

StatusOr<int> torch_dtype_bits(std::string_view torch_dtype) {
  if (torch_dtype == "float32" || torch_dtype == "float") return 32;
  if (torch_dtype == "bfloat16" || torch_dtype == "float16" || torch_dtype == "half") return 16;
  if (torch_dtype == "float64" || torch_dtype == "double") return 64;
  if (torch_dtype == "int8" || torch_dtype == "uint8" || torch_dtype == "float8_e4m3fn") return 8;
  return invalid_argument("unknown torch_dtype ", quote_prefix(torch_dtype));
}

int64_t ParamCounts::bytes(int64_t params, int bits_per_param) {
  return (params * bits_per_param + 7) / 8;
}

ParamCounts HParams::param_counts() const {
  ParamCounts c;
  const int64_t h = hidden_size;
  c.num_blocks = num_hidden_layers;
  c.embedding = vocab_size * h;
  c.head = tie_word_embeddings ? 0 : vocab_size * h;
  c.final_norm = h;
  // q, k, v, o projections (fused or not, the element count is the same).
  c.attention_per_block = h * q_dim() + 2 * h * kv_dim() + q_dim() * h;
  if (qkv_bias) c.attention_per_block += q_dim() + 2 * kv_dim();
  if (o_bias) c.attention_per_block += h;
  c.mlp_per_block = 3 * h * intermediate_size;
  if (mlp_bias) c.mlp_per_block += 2 * intermediate_size + h;
  const int64_t pre = pre_norms ? (parallel_block ? 1 : 2) : 0;
  c.norms_per_block = (pre + (post_norms ? 2 : 0)) * h + (qk_norm ? 2 * head_dim : 0);
  return c;
}

}  // namespace qbc::frontend
