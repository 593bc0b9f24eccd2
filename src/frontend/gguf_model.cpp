// GGUF → HF: config.json composition, tensor name mapping and read transforms.
//
// Sources for the mapping (read, not copied): llama.cpp gguf-py/gguf/tensor_mapping.py and
// convert_hf_to_gguf.py. Facts relied on:
//  - LlamaModel.modify_tensors permutes q_proj/k_proj rows (weights and biases) with
//    reshape(n_head, 2, rows / n_head / 2, ...).swapaxes(1, 2), n_head = num_key_value_heads for
//    k_proj. Qwen2/Qwen3 derive from TextModel directly and are stored unpermuted; Gemma2 too.
//  - Gemma2Model adds 1 to every "*norm.weight" before writing.
//  - Gemma2's pre_feedforward_layernorm is "ffn_norm", post_attention_layernorm is
//    "post_attention_norm" and post_feedforward_layernorm is "post_ffw_norm".
//  - Llama 3.x rope scaling is not stored as keys but as a `rope_freqs.weight` tensor of
//    per-frequency divisors; it is turned back into HF's rope_scaling {rope_type: llama3} here.
#include "gguf_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "qbc/support/quote.h"

namespace qbc::frontend::gguf_model {
namespace {

using Json = nlohmann::ordered_json;

constexpr double kPi = 3.14159265358979323846;

// A float32 metadata value as the shortest decimal that reads back to the same float32, so an
// eps stored as 9.9999997e-06 composes as 1e-05, the value the HF config carried.
double f32_decimal(double v) {
  const float f = static_cast<float>(v);
  char buf[32];
  for (int precision = 1; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, static_cast<double>(f));
    if (std::strtof(buf, nullptr) == f) return std::strtod(buf, nullptr);
  }
  return v;
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// `{arch}.suffix` helpers. Optional getters return `fallback` when the key is absent.
struct Meta {
  const GgufFile& gguf;
  std::string arch;

  std::string key(std::string_view suffix) const { return arch + "." + std::string(suffix); }
  StatusOr<int64_t> positive(std::string_view suffix) const {
    const std::string k = key(suffix);
    QBC_ASSIGN_OR_RETURN(int64_t v, gguf.get_int(k));
    if (v <= 0) {
      return invalid_argument(gguf.path().string(), ": metadata key '", k, "' = ", v,
                              " must be positive");
    }
    return v;
  }
  StatusOr<int64_t> positive_or(std::string_view suffix, int64_t fallback) const {
    if (!gguf.has(key(suffix))) return fallback;
    return positive(suffix);
  }
  bool has(std::string_view suffix) const { return gguf.has(key(suffix)); }
  StatusOr<double> f32(std::string_view suffix) const {
    QBC_ASSIGN_OR_RETURN(double v, gguf.get_float(key(suffix)));
    return f32_decimal(v);
  }
};

// Llama 3.x: recovers rope_scaling from `rope_freqs.weight`. llama.cpp's converter computes the
// divisors from factor, low/high_freq_factor and original_max_position_embeddings; every
// released Llama 3.1/3.2 uses low 1, high 4, original 8192, so those are assumed and the
// recomputed divisors must match the stored ones.
StatusOr<Json> llama3_rope_scaling(const GgufFile& gguf, const GgufTensor& freqs, double rope_theta,
                                   int64_t rotary_dim) {
  std::vector<float> stored;
  QBC_RETURN_IF_ERROR(gguf.read_f32(freqs, &stored));
  if (static_cast<int64_t>(stored.size()) != rotary_dim / 2) {
    return invalid_argument(gguf.path().string(), ": tensor 'rope_freqs.weight' has ",
                            stored.size(), " elements, expected rotary_dim / 2 = ", rotary_dim / 2);
  }
  const double factor = *std::max_element(stored.begin(), stored.end());
  const double low = 1.0, high = 4.0, original = 8192.0;
  for (size_t i = 0; i < stored.size(); ++i) {
    const double freq = 1.0 / std::pow(rope_theta, 2.0 * i / static_cast<double>(rotary_dim));
    const double wavelen = 2.0 * kPi / freq;
    double divisor = 1.0;
    if (wavelen > original / low) {
      divisor = factor;
    } else if (wavelen >= original / high) {
      const double smooth = (original / wavelen - low) / (high - low);
      divisor = 1.0 / ((1.0 - smooth) / factor + smooth);
    }
    if (std::fabs(divisor - stored[i]) > 1e-3 * divisor) {
      return unimplemented(gguf.path().string(), ": tensor 'rope_freqs.weight' element ", i, " = ",
                           stored[i], " does not match llama3 rope scaling (factor ", factor,
                           ", low_freq_factor 1, high_freq_factor 4, original 8192)");
    }
  }
  Json rs;
  rs["rope_type"] = "llama3";
  rs["factor"] = f32_decimal(factor);
  rs["low_freq_factor"] = low;
  rs["high_freq_factor"] = high;
  rs["original_max_position_embeddings"] = static_cast<int64_t>(original);
  return rs;
}

// rope_scaling from `{arch}.rope.scaling.*` (or the legacy `{arch}.rope.scale_linear`); null
// when the model is unscaled.
StatusOr<Json> rope_scaling(const Meta& m, int64_t context_length) {
  if (m.has("rope.scaling.type")) {
    QBC_ASSIGN_OR_RETURN(std::string type, m.gguf.get_string(m.key("rope.scaling.type")));
    if (type == "none") return Json(nullptr);
    if (type != "linear" && type != "yarn") {
      return unimplemented(m.gguf.path().string(), ": metadata key '", m.key("rope.scaling.type"),
                           "' = ", quote_prefix(type), " is not supported (supported: none, linear, yarn)");
    }
    Json rs;
    rs["rope_type"] = type;
    QBC_ASSIGN_OR_RETURN(rs["factor"], m.f32("rope.scaling.factor"));
    if (type == "yarn") {
      QBC_ASSIGN_OR_RETURN(rs["original_max_position_embeddings"],
                           m.positive_or("rope.scaling.original_context_length", context_length));
      if (m.has("rope.scaling.yarn_beta_fast")) {
        QBC_ASSIGN_OR_RETURN(rs["beta_fast"], m.f32("rope.scaling.yarn_beta_fast"));
      }
      if (m.has("rope.scaling.yarn_beta_slow")) {
        QBC_ASSIGN_OR_RETURN(rs["beta_slow"], m.f32("rope.scaling.yarn_beta_slow"));
      }
    }
    return rs;
  }
  if (m.has("rope.scale_linear")) {
    QBC_ASSIGN_OR_RETURN(double factor, m.f32("rope.scale_linear"));
    if (factor == 1.0) return Json(nullptr);
    Json rs;
    rs["rope_type"] = "linear";
    rs["factor"] = factor;
    return rs;
  }
  return Json(nullptr);
}

// The vocabulary size: `{arch}.vocab_size`, else the token list, else the embedding rows.
StatusOr<int64_t> vocab_size(const Meta& m) {
  if (m.has("vocab_size")) return m.positive("vocab_size");
  if (const GgufValue* tokens = m.gguf.find("tokenizer.ggml.tokens")) {
    if (tokens->type == GgufType::kArray && tokens->array_size() > 0) {
      return static_cast<int64_t>(tokens->array_size());
    }
  }
  if (const GgufTensor* embd = m.gguf.find_tensor("token_embd.weight")) {
    if (embd->dims.size() == 2) return embd->dims[1];
  }
  return not_found(m.gguf.path().string(), ": no vocabulary size: neither '", m.key("vocab_size"),
                   "', 'tokenizer.ggml.tokens' nor tensor 'token_embd.weight'");
}

// HF block sub-names for the llama.cpp block tensor base names.
const std::map<std::string, std::string, std::less<>>& block_names(std::string_view arch) {
  static const std::map<std::string, std::string, std::less<>> common = {
      {"attn_norm", "input_layernorm"},
      {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"},
      {"attn_q_norm", "self_attn.q_norm"},
      {"attn_k_norm", "self_attn.k_norm"},
      {"ffn_gate", "mlp.gate_proj"},
      {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},
      {"ffn_norm", "post_attention_layernorm"},
  };
  static const std::map<std::string, std::string, std::less<>> gemma2 = [] {
    auto m = common;
    m["ffn_norm"] = "pre_feedforward_layernorm";
    m["post_attention_norm"] = "post_attention_layernorm";
    m["post_ffw_norm"] = "post_feedforward_layernorm";
    return m;
  }();
  return arch == "gemma2" ? gemma2 : common;
}

const std::vector<std::pair<std::string, std::string>>& global_names() {
  static const std::vector<std::pair<std::string, std::string>> names = {
      {"token_embd", "model.embed_tokens"}, {"output_norm", "model.norm"}, {"output", "lm_head"}};
  return names;
}

// "blk.12.attn_q.weight" → HF name, or "" when there is no mapping.
std::string hf_name_for(std::string_view gguf_name, std::string_view arch) {
  const size_t dot = gguf_name.rfind('.');
  if (dot == std::string_view::npos) return "";
  const std::string_view leaf = gguf_name.substr(dot + 1);
  if (leaf != "weight" && leaf != "bias") return "";
  std::string_view base = gguf_name.substr(0, dot);
  if (base.substr(0, 4) != "blk.") {
    for (const auto& [g, h] : global_names()) {
      if (base == g) return h + "." + std::string(leaf);
    }
    return "";
  }
  base.remove_prefix(4);
  const size_t dot2 = base.find('.');
  if (dot2 == std::string_view::npos || dot2 == 0) return "";
  const std::string_view layer = base.substr(0, dot2);
  if (!std::all_of(layer.begin(), layer.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return "";
  }
  const auto& names = block_names(arch);
  auto it = names.find(base.substr(dot2 + 1));
  if (it == names.end()) return "";
  return "model.layers." + std::string(layer) + "." + it->second + "." + std::string(leaf);
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

const std::vector<std::string_view>& supported_architectures() {
  static const std::vector<std::string_view> archs = {"llama", "qwen2", "qwen3", "gemma2"};
  return archs;
}

StatusOr<std::string> hf_architecture(const GgufFile& gguf) {
  QBC_ASSIGN_OR_RETURN(std::string arch, gguf.get_string("general.architecture"));
  if (arch == "llama") return std::string("LlamaForCausalLM");
  if (arch == "qwen2") return std::string("Qwen2ForCausalLM");
  if (arch == "qwen3") return std::string("Qwen3ForCausalLM");
  if (arch == "gemma2") return std::string("Gemma2ForCausalLM");
  std::string list;
  for (std::string_view a : supported_architectures())
    list += (list.empty() ? "" : ", ") + std::string(a);
  return unimplemented(gguf.path().string(), ": GGUF architecture ", quote_prefix(arch),
                       " is not supported (supported: ", list, ")");
}

StatusOr<std::string> compose_config_json(const GgufFile& gguf) {
  QBC_ASSIGN_OR_RETURN(std::string hf_arch, hf_architecture(gguf));
  QBC_ASSIGN_OR_RETURN(std::string arch, gguf.get_string("general.architecture"));
  const Meta m{gguf, arch};

  Json cfg;
  cfg["architectures"] = Json::array({hf_arch});
  cfg["model_type"] = arch;
  QBC_ASSIGN_OR_RETURN(int64_t hidden, m.positive("embedding_length"));
  QBC_ASSIGN_OR_RETURN(int64_t heads, m.positive("attention.head_count"));
  QBC_ASSIGN_OR_RETURN(int64_t kv_heads, m.positive_or("attention.head_count_kv", heads));
  QBC_ASSIGN_OR_RETURN(int64_t head_dim, m.positive_or("attention.key_length", hidden / heads));
  QBC_ASSIGN_OR_RETURN(int64_t context, m.positive_or("context_length", 2048));
  cfg["hidden_size"] = hidden;
  QBC_ASSIGN_OR_RETURN(cfg["intermediate_size"], m.positive("feed_forward_length"));
  QBC_ASSIGN_OR_RETURN(int64_t blocks, m.positive("block_count"));
  // Every block holds at least one tensor, so the file's tensor table bounds the count before
  // anything is built per block.
  if (static_cast<uint64_t>(blocks) > gguf.tensors().size()) {
    return invalid_argument(gguf.path().string(), ": metadata key '", m.key("block_count"),
                            "' = ", blocks, " exceeds the ", gguf.tensors().size(),
                            " tensors of the file (each block has tensors)");
  }
  cfg["num_hidden_layers"] = blocks;
  cfg["num_attention_heads"] = heads;
  cfg["num_key_value_heads"] = kv_heads;
  cfg["head_dim"] = head_dim;
  QBC_ASSIGN_OR_RETURN(cfg["vocab_size"], vocab_size(m));
  cfg["max_position_embeddings"] = context;
  QBC_ASSIGN_OR_RETURN(cfg["rms_norm_eps"], m.f32("attention.layer_norm_rms_epsilon"));
  // llama.cpp's default base when the key is absent (older conversions, e.g. stories260K).
  double theta = 10000.0;
  if (m.has("rope.freq_base")) {
    QBC_ASSIGN_OR_RETURN(theta, m.f32("rope.freq_base"));
  }
  cfg["rope_theta"] = theta;
  if (const GgufTensor* freqs = gguf.find_tensor("rope_freqs.weight"); freqs && arch == "llama") {
    QBC_ASSIGN_OR_RETURN(int64_t rot, m.positive_or("rope.dimension_count", head_dim));
    QBC_ASSIGN_OR_RETURN(cfg["rope_scaling"], llama3_rope_scaling(gguf, *freqs, theta, rot));
  } else {
    QBC_ASSIGN_OR_RETURN(cfg["rope_scaling"], rope_scaling(m, context));
  }
  cfg["tie_word_embeddings"] = gguf.find_tensor("output.weight") == nullptr;
  if (arch == "llama" || arch == "qwen3") {
    cfg["attention_bias"] = gguf.find_tensor("blk.0.attn_q.bias") != nullptr;
  }
  if (arch == "llama") cfg["mlp_bias"] = gguf.find_tensor("blk.0.ffn_up.bias") != nullptr;
  if (arch == "qwen2" || arch == "qwen3") cfg["use_sliding_window"] = false;
  if (arch == "gemma2") {
    cfg["hidden_activation"] = "gelu_pytorch_tanh";
    QBC_ASSIGN_OR_RETURN(cfg["sliding_window"], m.positive_or("attention.sliding_window", 4096));
    if (m.has("attn_logit_softcapping")) {
      QBC_ASSIGN_OR_RETURN(cfg["attn_logit_softcapping"], m.f32("attn_logit_softcapping"));
    }
    if (m.has("final_logit_softcapping")) {
      QBC_ASSIGN_OR_RETURN(cfg["final_logit_softcapping"], m.f32("final_logit_softcapping"));
    }
    // GGUF has no query_pre_attn_scalar; llama.cpp scales q by 1/sqrt(hidden / heads) for the
    // 46-layer 27B model and by 1/sqrt(head_dim) otherwise, matching the HF configs.
    cfg["query_pre_attn_scalar"] = blocks == 46 ? hidden / heads : head_dim;
  } else {
    cfg["hidden_act"] = "silu";
  }
  if (gguf.has("tokenizer.ggml.bos_token_id")) {
    QBC_ASSIGN_OR_RETURN(cfg["bos_token_id"], gguf.get_int("tokenizer.ggml.bos_token_id"));
  }
  if (gguf.has("tokenizer.ggml.eos_token_id")) {
    QBC_ASSIGN_OR_RETURN(cfg["eos_token_id"], gguf.get_int("tokenizer.ggml.eos_token_id"));
  }
  if (const GgufTensor* embd = gguf.find_tensor("token_embd.weight")) {
    if (embd->type == GgmlType::kF32) cfg["torch_dtype"] = "float32";
    if (embd->type == GgmlType::kF16) cfg["torch_dtype"] = "float16";
    if (embd->type == GgmlType::kBF16) cfg["torch_dtype"] = "bfloat16";
  }
  try {
    return cfg.dump(2);
  } catch (const nlohmann::json::exception& e) {
    return internal_error(gguf.path().string(), ": composing config.json: ", e.what());
  }
}

StatusOr<MappedTensors> map_tensors(const GgufFile& gguf, const HParams& hp) {
  QBC_ASSIGN_OR_RETURN(std::string arch, gguf.get_string("general.architecture"));
  const std::filesystem::path file = std::filesystem::absolute(gguf.path());
  MappedTensors out;
  for (const GgufTensor& t : gguf.tensors()) {
    std::string hf = hf_name_for(t.name, arch);
    if (hf.empty()) {
      // rope_freqs is folded into config.json's rope_scaling (compose_config_json).
      if (!(arch == "llama" && t.name == "rope_freqs.weight")) out.unmapped.push_back(t.name);
      continue;
    }
    TensorInfo info;
    info.name = std::move(hf);
    info.shape = t.shape();
    info.dtype = upper(ggml_type_name(t.type));
    info.file = file;
    info.name_in_file = t.name;
    if (arch == "llama") {
      if (info.name.find(".self_attn.q_proj.") != std::string::npos) {
        info.transform = TensorTransform::kUnpermuteRopeRows;
        info.rope_heads = hp.num_attention_heads;
      } else if (info.name.find(".self_attn.k_proj.") != std::string::npos) {
        info.transform = TensorTransform::kUnpermuteRopeRows;
        info.rope_heads = hp.num_key_value_heads;
      }
    } else if (arch == "gemma2" && ends_with(info.name, "norm.weight")) {
      info.transform = TensorTransform::kSubtractOne;
    }
    if (info.transform == TensorTransform::kUnpermuteRopeRows) {
      const int64_t rows = info.shape.empty() ? 0 : info.shape[0];
      if (info.rope_heads <= 0 || rows % (2 * info.rope_heads) != 0) {
        return invalid_argument(file.string(), ": tensor '", t.name, "' (", info.name, ") has ",
                                rows, " rows, which do not split into ", info.rope_heads,
                                " heads of rotary pairs");
      }
    }
    out.tensors.push_back(std::move(info));
  }
  std::sort(out.tensors.begin(), out.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  return out;
}

std::string gguf_name_for(std::string_view hf_name, std::string_view arch) {
  const size_t dot = hf_name.rfind('.');
  if (dot == std::string_view::npos) return "";
  const std::string leaf(hf_name.substr(dot + 1));
  const std::string_view base = hf_name.substr(0, dot);
  for (const auto& [g, h] : global_names()) {
    if (base == h) return g + "." + leaf;
  }
  constexpr std::string_view kLayers = "model.layers.";
  if (base.substr(0, kLayers.size()) != kLayers) return "";
  const std::string_view rest = base.substr(kLayers.size());
  const size_t dot2 = rest.find('.');
  if (dot2 == std::string_view::npos) return "";
  for (const auto& [g, h] : block_names(arch)) {
    if (rest.substr(dot2 + 1) == h) {
      return "blk." + std::string(rest.substr(0, dot2)) + "." + g + "." + leaf;
    }
  }
  return "";
}

StatusOr<std::vector<int64_t>> hf_row_sources(const TensorInfo& info, size_t count) {
  if (info.transform != TensorTransform::kUnpermuteRopeRows) return std::vector<int64_t>{};
  // GGUF row h*hd + 2*j + i holds HF row h*hd + i*half + j (i in {0, 1}, j < half).
  const int64_t rows = info.shape.empty() ? 0 : info.shape[0];
  const int64_t heads = info.rope_heads;
  if (heads <= 0 || rows % (2 * heads) != 0 || count % static_cast<size_t>(rows) != 0) {
    return invalid_argument(info.file.string(), ": tensor '", info.name_in_file, "' (", info.name,
                            "): ", count, " values do not unpermute as ", rows, " rows in ",
                            heads, " heads");
  }
  const int64_t head_dim = rows / heads;
  const int64_t half = head_dim / 2;
  std::vector<int64_t> sources(static_cast<size_t>(rows));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < half; ++j) {
        sources[static_cast<size_t>(h * head_dim + i * half + j)] = h * head_dim + 2 * j + i;
      }
    }
  }
  return sources;
}

Status apply_transform(const TensorInfo& info, std::vector<float>* values) {
  if (info.transform == TensorTransform::kSubtractOne) {
    for (float& v : *values) v -= 1.0f;
    return ok_status();
  }
  return reorder_rows(info, values);
}

}  // namespace qbc::frontend::gguf_model
