// Models every equivalence-transform test runs on: stories260K (untied and tied) and
// small random models of every supported family (GQA, biases, QK-norms, Gemma's
// post-norms and soft-caps, Phi-3's fused projections and partial rotary, SmolLM3's NoPE
// layers, EXAONE 3.5's names, EXAONE 4.0's post-norms-only block, Phi-4-mini's tied partial
// rotary, Cohere2's parallel LayerNorm block, HyperCLOVAX's muP multipliers and Peri-LN), plus the
// check that a pass list leaves the float logits unchanged.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qbc/frontend/hparams.h"
#include "qbc/frontend/importer.h"
#include "qbc/frontend/model_source.h"
#include "qbc/frontend/model_weight_reader.h"
#include "qbc/frontend/random_model.h"
#include "qbc/ir/weight_reader.h"
#include "qbc/quant/pass.h"
#include "qbc/ref/session.h"
#include "test_support.h"

/// Resolves the shared folder into `shared` and checks the case's shared asset: under CI
/// a missing one fails the test; elsewhere the case falls back to its own family config
/// (TransformCase::fallback_json), so the family suite never skips.
#define QBC_REQUIRE_TRANSFORM_CASE(shared, c)                                            \
  const std::filesystem::path shared = ::qbc::testing::shared_dir();                     \
  if (std::getenv("CI") != nullptr && !::qbc::testing::case_asset_present(c, shared)) {  \
    FAIL() << "shared asset missing: " << (shared / (c).shared_dir / (c).shared_config); \
  }

/// A test on a shrunk family config (`rel` under ../shared): under CI a missing one
/// fails; elsewhere the case's fallback config stands in (load_transform_case).
#define QBC_REQUIRE_FAMILY_CONFIG(rel)                                            \
  if (std::getenv("CI") != nullptr &&                                             \
      !std::filesystem::exists(::qbc::testing::shared_dir() / (rel))) {           \
    FAIL() << "shared asset missing: " << (::qbc::testing::shared_dir() / (rel)); \
  }

namespace qbc::testing {

struct TransformCase {
  std::string name;
  std::string shared_dir;     ///< A shared HF folder (relative to ../shared), or
  std::string shared_config;  ///< a shared config.json to shrink, or
  std::string inline_json;    ///< an inline config.
  std::string merge_patch;    ///< JSON merged into the config.
  /// The family's own config (shrunk like a shared config, then random weights), used
  /// when the shared asset is absent outside CI.
  std::string fallback_json;
};

/// True when the case needs no shared asset or has it.
inline bool case_asset_present(const TransformCase& c, const std::filesystem::path& shared) {
  if (!c.shared_dir.empty()) return std::filesystem::exists(shared / c.shared_dir);
  if (!c.shared_config.empty()) return std::filesystem::exists(shared / c.shared_config);
  return true;
}

// The families' config keys that matter to the transforms (the shapes are overridden).
inline constexpr const char* kLlamaFallback = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
  "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 4096, "rms_norm_eps": 1e-05,
  "rope_theta": 500000.0, "rope_scaling": {"factor": 32.0, "low_freq_factor": 1.0,
  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "tie_word_embeddings": true, "hidden_act": "silu", "attention_bias": false, "mlp_bias": false,
  "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"})";
inline constexpr const char* kStoriesFallback = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
  "intermediate_size": 172, "num_hidden_layers": 5, "num_attention_heads": 8, "num_key_value_heads": 4,
  "vocab_size": 512, "max_position_embeddings": 512, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "tie_word_embeddings": false, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
  "torch_dtype": "float32"})";
inline constexpr const char* kStoriesTiedFallback = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
  "intermediate_size": 172, "num_hidden_layers": 5, "num_attention_heads": 8, "num_key_value_heads": 4,
  "vocab_size": 512, "max_position_embeddings": 512, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "tie_word_embeddings": true, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
  "torch_dtype": "float32"})";
inline constexpr const char* kQwen2Fallback = R"({
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64,
  "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "vocab_size": 256, "max_position_embeddings": 4096, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": 4096, "use_sliding_window": false, "max_window_layers": 21,
  "tie_word_embeddings": true, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
  "torch_dtype": "float32"})";
inline constexpr const char* kQwen3Fallback = R"({
  "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
  "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 4096, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0, "attention_bias": false, "sliding_window": null, "use_sliding_window": false,
  "tie_word_embeddings": true, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2,
  "torch_dtype": "float32"})";
inline constexpr const char* kMistralFallback = R"({
  "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 64,
  "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 4096, "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0, "sliding_window": null, "hidden_act": "silu", "tie_word_embeddings": false,
  "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"})";
inline constexpr const char* kGemma2Fallback = R"({
  "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": 64,
  "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 4096, "rms_norm_eps": 1e-06,
  "rope_theta": 10000.0, "sliding_window": 4096, "attn_logit_softcapping": 50.0,
  "final_logit_softcapping": 30.0, "query_pre_attn_scalar": 256, "hidden_act": "gelu_pytorch_tanh",
  "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true, "bos_token_id": 2,
  "eos_token_id": 1, "pad_token_id": 0, "torch_dtype": "float32"})";

inline std::ostream& operator<<(std::ostream& os, const TransformCase& c) { return os << c.name; }

inline std::vector<TransformCase> transform_cases() {
  return {
      {"stories260k", "models/stories260k/hf", "", "", "", kStoriesFallback},
      {"stories260k_tied", "models/stories260k/hf-tied", "", "", "", kStoriesTiedFallback},
      {"llama32_gqa_tied", "", "model-configs/Llama-3.2-1B-Instruct/config.json", "", "",
       kLlamaFallback},
      {"qwen25_bias_tied", "", "model-configs/Qwen2.5-0.5B-Instruct/config.json", "", "",
       kQwen2Fallback},
      {"qwen3_qk_norm", "", "model-configs/Qwen3-0.6B/config.json", "", "", kQwen3Fallback},
      {"mistral", "", "model-configs/Mistral-7B-Instruct-v0.3/config.json", "", "",
       kMistralFallback},
      {"gemma2_post_norm_softcap", "", "model-configs/gemma-2-2b-it/config.json", "",
       R"({"attn_logit_softcapping": 5.0, "final_logit_softcapping": 8.0})", kGemma2Fallback},
      {"phi3_fused_partial_rotary", "", "", R"({
        "architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
        "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
        "max_position_embeddings": 4096, "partial_rotary_factor": 0.5, "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0, "rope_scaling": null, "sliding_window": null, "hidden_act": "silu",
        "tie_word_embeddings": false, "attention_bias": false, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float32"})",
       "", ""},
      // SmolLM3: layer 1 has no RoPE (no_rope_layer_interval 2) and, with use_sliding_window,
      // slides (HF's default layer_types).
      {"smollm3_nope_sliding", "", "", R"({
        "architectures": ["SmolLM3ForCausalLM"], "model_type": "smollm3", "hidden_size": 64,
        "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-06, "rope_theta": 5000000.0, "no_rope_layer_interval": 2,
        "use_sliding_window": true, "sliding_window": 8, "hidden_act": "silu",
        "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float32"})",
       "", ""},
      // EXAONE 3.5: GPT-2-style tensor names and its own keys.
      {"exaone35", "", "", R"({
        "architectures": ["ExaoneForCausalLM"], "model_type": "exaone", "hidden_size": 64,
        "intermediate_size": 96, "num_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 4096,
        "layer_norm_epsilon": 1e-05, "activation_function": "silu", "rope_theta": 1000000.0,
        "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float32"})",
       "", ""},
      // EXAONE 4.0: q/k norms, norms after the sublayers only, layer 0 slides with RoPE,
      // layer 1 is global without RoPE.
      {"exaone4_hybrid", "", "", R"({
        "architectures": ["Exaone4ForCausalLM"], "model_type": "exaone4", "hidden_size": 64,
        "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
        "sliding_window": 8, "sliding_window_pattern": 2, "hidden_act": "silu",
        "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "float32"})",
       "", ""},
      // Phi-4-mini's layout: tied embeddings, partial_rotary_factor 0.75 (12 of 16 dims).
      {"phi4_mini_tied_partial", "", "", R"({
      "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "hidden_size": 64,
      "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 4096,
      "partial_rotary_factor": 0.75, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
      "rope_scaling": null, "sliding_window": 262144, "hidden_act": "silu",
      "tie_word_embeddings": true, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"})",
       "", ""},
      // Cohere2 (Command R7B's layout): LayerNorms without bias, the parallel block, interleaved
      // RoPE on the sliding layer (read as rotate_half), a global NoPE layer, logits times 0.25.
      {"cohere2_parallel_layernorm", "", "", R"({
      "architectures": ["Cohere2ForCausalLM"], "model_type": "cohere2", "hidden_size": 64,
      "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 4096,
      "layer_norm_eps": 1e-05, "rope_theta": 50000.0, "logit_scale": 0.25, "sliding_window": 8,
      "sliding_window_pattern": 2, "hidden_act": "silu", "tie_word_embeddings": true,
      "bos_token_id": 5, "eos_token_id": 255001, "torch_dtype": "float32"})",
       "", ""},
      // HyperCLOVAX (SEED Think's layout): μP multipliers (embeddings, attention, residual scale
      // nodes on both sublayers, logits) and Peri-LN post norms.
      {"hyperclovax_mup_peri_ln", "", "", R"({
      "architectures": ["HyperCLOVAXForCausalLM"], "model_type": "hyperclovax",
      "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
      "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 50000.0,
      "embedding_multiplier": 2.5, "attention_multiplier": 0.125, "residual_multiplier": 0.4,
      "logits_scaling": 0.6, "use_post_norm": true, "hidden_act": "silu",
      "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2,
      "torch_dtype": "float32"})",
       "", ""},
  };
}

/// The case of transform_cases() called `name` (a test failure, and the first case, when
/// there is none).
inline const TransformCase& find_transform_case(const std::string& name) {
  static const std::vector<TransformCase> cases = transform_cases();
  for (const TransformCase& c : cases) {
    if (c.name == name) return c;
  }
  ADD_FAILURE() << "no transform case " << name;
  return cases.front();
}

/// A loaded case: the model source (owns the files' mapping) and its float graph.
struct LoadedCase {
  std::unique_ptr<frontend::ModelSource> source;
  ir::Graph graph;
  int64_t vocab = 0;
};

/// Opens (or writes, for random cases: 2 layers, hidden 64, 4 query / 2 KV heads of 16,
/// weights N(0, 0.08) so logits are far from flat) the case's model.
inline StatusOr<LoadedCase> load_transform_case(const TransformCase& c,
                                                const std::filesystem::path& shared) {
  std::filesystem::path dir;
  const bool present = case_asset_present(c, shared);
  if (!present && c.fallback_json.empty()) {
    return not_found("shared asset of case ", c.name, " is missing and it has no fallback config");
  }
  if (!c.shared_dir.empty() && present) {
    dir = shared / c.shared_dir;
  } else {
    frontend::RandomModelOptions opt;
    if (!c.shared_dir.empty()) {
      // The shared model is absent (outside CI): a random model of its family and shape.
      opt.config_json = c.fallback_json;
    } else if (!c.shared_config.empty()) {
      frontend::ConfigOverrides o;
      o.num_hidden_layers = 2;
      o.hidden_size = 64;
      o.intermediate_size = 96;
      o.vocab_size = 256;
      o.num_attention_heads = 4;
      o.num_key_value_heads = 2;
      o.head_dim = 16;
      o.max_position_embeddings = 4096;
      QBC_ASSIGN_OR_RETURN(
          opt.config_json,
          frontend::apply_config_overrides(
              present ? read_file(shared / c.shared_config) : c.fallback_json,
              present ? c.shared_config : c.name + " (fallback config)", o, std::nullopt));
    } else {
      opt.config_json = c.inline_json;
    }
    if (!c.merge_patch.empty()) {
      nlohmann::json j = nlohmann::json::parse(opt.config_json);
      j.merge_patch(nlohmann::json::parse(c.merge_patch));
      opt.config_json = j.dump(2);
    }
    dir = temp_dir() / c.name;
    opt.output_dir = dir;
    opt.seed = 11;
    opt.init_std = 0.08;
    QBC_RETURN_IF_ERROR(frontend::write_random_model(opt));
  }
  LoadedCase out;
  QBC_ASSIGN_OR_RETURN(frontend::ModelSource src, frontend::ModelSource::open(dir));
  out.source = std::make_unique<frontend::ModelSource>(std::move(src));
  frontend::ImportOptions io;
  io.max_cache_length = 64;
  QBC_ASSIGN_OR_RETURN(out.graph, frontend::build_decoder_graph(out.source->hparams(), io));
  out.vocab = out.source->hparams().vocab_size;
  return out;
}

/// Fixed token ids (< vocab) for the equivalence checks.
inline std::vector<int32_t> transform_test_ids(int64_t vocab, size_t n = 24) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < n; ++i)
    ids.push_back(static_cast<int32_t>((1 + 37 * i + (i * i) % 11) % vocab));
  return ids;
}

/// Float32 logits of `ids` through the reference runtime.
inline StatusOr<std::vector<float>> float_logits(const ir::Graph& g, const ir::WeightReader& reader,
                                                 const std::vector<int32_t>& ids) {
  QBC_ASSIGN_OR_RETURN(std::unique_ptr<ref::Session> s, ref::Session::create(g, reader));
  std::vector<float> logits;
  QBC_RETURN_IF_ERROR(s->forward(ids, &logits));
  return logits;
}

/// max |a - b| / max |a|.
inline double max_relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
    m = std::max(m, std::fabs(static_cast<double>(a[i])));
  }
  return a.size() == b.size() && m > 0 ? d / m : INFINITY;
}

}  // namespace qbc::testing
