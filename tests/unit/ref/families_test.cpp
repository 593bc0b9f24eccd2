// Cross-checks ref::Session against an independent naive HF decoder (naive_decoder.h) on small
// random models of every family without shared golden logits: Gemma 2 (softcaps, alternating
// sliding window, query_pre_attn_scalar, post-norms), Gemma 3 (q/k norms, local/global RoPE
// bases), Mistral (sliding window), Qwen2 (q/k/v biases), Qwen3 (q/k norms), Phi-3 (fused
// projections, partial rotary, LongRoPE), SmolLM3 (NoPE layers), EXAONE 3.5 (its own keys
// and tensor names), EXAONE 4.0 (q/k norms, post-norms only, NoPE global layers), Cohere2
// (LayerNorm, parallel block, interleaved RoPE read as rotate_half, logit scale), HyperCLOVAX
// (Granite's μP multipliers, Peri-LN post norms) and Llama RoPE scaling (llama3, linear, yarn,
// dynamic).
// The naive decoder itself is validated on stories260K against llama.cpp's golden logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "naive_decoder.h"
#include "qbc/frontend/hparams.h"
#include "qbc/frontend/importer.h"
#include "qbc/frontend/model_source.h"
#include "qbc/frontend/random_model.h"
#include "qbc/frontend/safetensors.h"
#include "qbc/ref/session.h"
#include "rel_error.h"
#include "test_support.h"

namespace qbc::ref::testing {
namespace {

namespace fs = std::filesystem;
using frontend::HParams;
using frontend::ModelSource;

/// Like rel_error(), but ignores what rounding the exact logits to float32 explains: the
/// Session returns float logits even in float64 mode, so each value may be off by half an ulp.
double rel_excess_over_f32_rounding(const std::vector<float>& a, const std::vector<double>& b) {
  double err = 0.0, scale = 1.0;
  for (size_t i = 0; i < b.size(); ++i) {
    const float r = std::abs(static_cast<float>(b[i]));
    const double half_ulp = 0.5 * (static_cast<double>(std::nextafter(r, INFINITY)) - r);
    err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]) - half_ulp);
    scale = std::max(scale, std::abs(b[i]));
  }
  return std::max(err, 0.0) / scale;
}

double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

/// Deterministic token ids in [1, vocab).
std::vector<int32_t> test_tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  uint32_t s = seed;
  for (int32_t& v : t) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<int32_t>(1 + (s >> 8) % static_cast<uint32_t>(vocab - 1));
  }
  return t;
}

HfWeightFn weights_of(const ModelSource& source) {
  return [&source](const std::string& name) {
    std::vector<float> v;
    if (!source.read_f32(name, &v).ok()) v.clear();
    return v;
  };
}

/// The tensors exactly as the checkpoint stores them.
HfWeightFn stored_weights_of(const frontend::SafetensorsCheckpoint& ckpt) {
  return [&ckpt](const std::string& name) {
    std::vector<float> v;
    if (!ckpt.read_f32(name, &v).ok()) v.clear();
    return v;
  };
}

/// Splits `n` tokens into HF forward calls: "prefill" (one call), "decode" (`prefill` tokens,
/// then one call per token) and "chunked" (calls of 3, 6 and the rest tokens; the second call
/// crosses the 8-token LongRoPE / dynamic-NTK switch of the rope cases with several tokens).
std::vector<size_t> schedule(const std::string& kind, size_t n, size_t prefill) {
  if (kind == "prefill") return {n};
  if (kind == "chunked") return {3, 6, n - 9};
  std::vector<size_t> calls = {prefill};
  calls.resize(n - prefill + 1, 1);
  return calls;
}

/// Naive logits of `tokens` run as the HF calls of `calls`.
std::vector<double> naive_run(NaiveDecoder& d, const std::vector<int32_t>& tokens,
                              const std::vector<size_t>& calls) {
  d.reset();
  std::vector<double> all;
  size_t at = 0;
  for (size_t n : calls) {
    std::vector<double> part = d.forward({tokens.begin() + at, tokens.begin() + at + n});
    all.insert(all.end(), part.begin(), part.end());
    at += n;
  }
  return all;
}

/// The same through a Session.
Status session_run(Session& s, const std::vector<int32_t>& tokens, const std::vector<size_t>& calls,
                   std::vector<float>* logits) {
  s.reset();
  logits->clear();
  std::vector<float> part;
  size_t at = 0;
  for (size_t n : calls) {
    QBC_RETURN_IF_ERROR(s.forward({tokens.begin() + at, tokens.begin() + at + n}, &part));
    logits->insert(logits->end(), part.begin(), part.end());
    at += n;
  }
  return ok_status();
}

/// One family case: where its config comes from, how it is shrunk, and what HF semantics the
/// parsed hyperparameters must show.
struct FamilyCase {
  std::string name;
  std::string shared_config;  ///< Relative to the shared dir; empty: `inline_json`.
  std::string inline_json;
  frontend::ConfigOverrides overrides;
  std::string merge_patch;  ///< JSON merge patch applied after the overrides.
  int64_t seq_len = 12;
  size_t prefill = 5;
  double init_std = 0.2;
  /// Checks the parsed HParams against HF's rules for the family (written from HF, not qbc).
  std::function<void(const HParams&)> check_hparams;
  /// HParams mutations that must change the naive logits (so the feature is exercised).
  std::vector<std::pair<std::string, std::function<void(HParams&)>>> sensitivity;
};

frontend::ConfigOverrides small(int64_t layers, std::optional<int64_t> head_dim = 16) {
  frontend::ConfigOverrides o;
  o.num_hidden_layers = layers;
  o.hidden_size = 64;
  o.intermediate_size = 128;
  o.vocab_size = 256;
  o.num_attention_heads = 4;
  o.num_key_value_heads = 2;
  o.head_dim = head_dim;
  return o;
}

void expect_windows(const HParams& hp, const std::vector<int64_t>& windows) {
  ASSERT_EQ(hp.layers.size(), windows.size());
  for (size_t i = 0; i < windows.size(); ++i) {
    EXPECT_EQ(hp.layers[i].sliding_window, windows[i]) << "layer " << i;
  }
}

void no_window(HParams& hp) {
  for (auto& l : hp.layers) l.sliding_window = 0;
}

std::string llama_with(const std::string& patch) {
  nlohmann::json j = nlohmann::json::parse(frontend::tiny_llama_config_json());
  j.merge_patch(nlohmann::json::parse(patch));
  return j.dump(2);
}

constexpr const char* kGemma3Json = R"({
  "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
  "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
  "max_position_embeddings": 131072, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
  "rope_scaling": {"rope_type": "linear", "factor": 8.0},
  "sliding_window": 4, "sliding_window_pattern": 2,
  "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
  "query_pre_attn_scalar": 32, "attn_logit_softcapping": null, "final_logit_softcapping": null,
  "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": true,
  "bos_token_id": 2, "eos_token_id": 1, "torch_dtype": "float32"
})";

constexpr const char* kPhi3Json = R"({
  "architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
  "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
  "max_position_embeddings": 32, "original_max_position_embeddings": 8,
  "partial_rotary_factor": 0.5, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
  "rope_scaling": {"type": "longrope", "short_factor": [1.0, 1.25, 1.5, 2.0],
                   "long_factor": [1.5, 3.0, 6.0, 12.0]},
  "sliding_window": null, "hidden_act": "silu", "tie_word_embeddings": false,
  "attention_bias": false, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"
})";

constexpr const char* kExaone35Json = R"({
  "architectures": ["ExaoneForCausalLM"], "model_type": "exaone",
  "hidden_size": 64, "num_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "vocab_size": 256, "max_position_embeddings": 1024, "layer_norm_epsilon": 1e-3,
  "activation_function": "silu", "rope_theta": 10000.0,
  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
  "bos_token_id": 1, "eos_token_id": 361, "torch_dtype": "float32"
})";

constexpr const char* kExaone4Json = R"({
  "architectures": ["Exaone4ForCausalLM"], "model_type": "exaone4",
  "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
  "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
  "sliding_window": 4, "sliding_window_pattern": 4, "hidden_act": "silu",
  "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 361, "torch_dtype": "float32"
})";

// Cohere2 (Command R7B's layout, small): layers 0-2 slide with interleaved RoPE (pattern 4),
// layer 3 is global without RoPE; LayerNorms, the parallel block and logit_scale 0.25.
constexpr const char* kCohere2Json = R"({
  "architectures": ["Cohere2ForCausalLM"], "model_type": "cohere2",
  "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4,
  "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
  "max_position_embeddings": 4096, "layer_norm_eps": 1e-05, "rope_theta": 50000.0,
  "logit_scale": 0.25, "sliding_window": 4, "sliding_window_pattern": 4, "hidden_act": "silu",
  "attention_bias": false, "tie_word_embeddings": true, "bos_token_id": 5,
  "eos_token_id": 255001, "torch_dtype": "float32"
})";

// HyperCLOVAX (HyperCLOVA X SEED Think's layout, small): Granite's μP multipliers, all away from
// their neutral values, and Peri-LN (use_post_norm: post_norm1 / post_norm2).
constexpr const char* kHyperClovaxJson = R"({
  "architectures": ["HyperCLOVAXForCausalLM"], "model_type": "hyperclovax",
  "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256,
  "max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 50000.0,
  "embedding_multiplier": 2.5, "attention_multiplier": 0.125, "residual_multiplier": 0.4,
  "logits_scaling": 0.6, "use_post_norm": true, "hidden_act": "silu",
  "attention_bias": false, "mlp_bias": false, "tie_word_embeddings": false,
  "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"
})";

std::vector<FamilyCase> family_cases() {
  std::vector<FamilyCase> cases;
  {
    FamilyCase c;
    c.name = "gemma2";
    c.shared_config = "model-configs/gemma-2-2b-it/config.json";
    c.overrides = small(3, 32);  // q_dim 128 != hidden 64, as in the real model
    c.overrides.sliding_window = 4;
    // Strong caps so soft-capping changes the result at these magnitudes.
    c.merge_patch = R"({"attn_logit_softcapping": 1.5, "final_logit_softcapping": 2.0})";
    c.check_hparams = [](const HParams& hp) {
      // HF Gemma2: layer i slides iff i is even; scale query_pre_attn_scalar^-1/2 (256 here).
      expect_windows(hp, {4, 0, 4});
      EXPECT_DOUBLE_EQ(hp.query_scale, 1.0 / 16.0);
      EXPECT_DOUBLE_EQ(hp.attn_logit_softcap, 1.5);
      EXPECT_DOUBLE_EQ(hp.final_logit_softcap, 2.0);
      EXPECT_EQ(hp.activation, frontend::Activation::kGeluTanh);
      EXPECT_TRUE(hp.tie_word_embeddings);
    };
    c.sensitivity = {{"sliding window", no_window},
                     {"attn softcap", [](HParams& hp) { hp.attn_logit_softcap = 0; }},
                     {"final softcap", [](HParams& hp) { hp.final_logit_softcap = 0; }}};
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "gemma3";
    c.inline_json = kGemma3Json;
    c.check_hparams = [](const HParams& hp) {
      // HF Gemma3: layer i slides iff (i + 1) % pattern != 0; sliding layers use
      // rope_local_base_freq without scaling, global layers rope_theta with rope_scaling.
      expect_windows(hp, {4, 0, 4});
      ASSERT_EQ(hp.layers.size(), 3u);
      EXPECT_DOUBLE_EQ(hp.layers[0].rope_theta, 10000.0);
      EXPECT_FALSE(hp.layers[0].rope_scaled);
      EXPECT_DOUBLE_EQ(hp.layers[1].rope_theta, 1000000.0);
      EXPECT_TRUE(hp.layers[1].rope_scaled);
      EXPECT_DOUBLE_EQ(hp.query_scale, 1.0 / std::sqrt(32.0));
      EXPECT_EQ(hp.attn_logit_softcap, 0.0);
      EXPECT_EQ(hp.final_logit_softcap, 0.0);
    };
    c.sensitivity = {
        {"sliding window", no_window},
        {"local rope base", [](HParams& hp) { hp.layers[0].rope_theta = 1e6; }},
        {"global rope scaling", [](HParams& hp) { hp.layers[1].rope_scaled = false; }}};
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "mistral";
    c.shared_config = "model-configs/Mistral-7B-Instruct-v0.3/config.json";
    c.overrides = small(2);
    c.overrides.sliding_window = 4;
    c.check_hparams = [](const HParams& hp) {
      expect_windows(hp, {4, 4});  // HF Mistral: every layer.
      EXPECT_DOUBLE_EQ(hp.query_scale, 0.25);
    };
    c.sensitivity = {{"sliding window", no_window}};
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "qwen2";
    c.shared_config = "model-configs/Qwen2.5-0.5B-Instruct/config.json";
    c.overrides = small(2, std::nullopt);  // head_dim = 64 / 4
    c.check_hparams = [](const HParams& hp) {
      EXPECT_EQ(hp.head_dim, 16);
      expect_windows(hp, {0, 0});  // use_sliding_window: false
      EXPECT_TRUE(hp.tie_word_embeddings);
    };
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "qwen3";
    c.shared_config = "model-configs/Qwen3-0.6B/config.json";
    c.overrides = small(2, 32);  // q_dim 128 != hidden 64, as in the real model
    c.check_hparams = [](const HParams& hp) {
      expect_windows(hp, {0, 0});
      EXPECT_DOUBLE_EQ(hp.rope_theta, 1e6);
    };
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "phi3_longrope";
    c.inline_json = kPhi3Json;
    c.check_hparams = [](const HParams& hp) {
      EXPECT_EQ(hp.head_dim, 16);
      EXPECT_EQ(hp.rotary_dim, 8);
      EXPECT_EQ(hp.rope_scaling.type, frontend::RopeScalingType::kLongRope);
      EXPECT_EQ(hp.rope_scaling.original_max_position_embeddings, 8);
      EXPECT_EQ(hp.rope_scaling.short_factor.size(), 4u);
      expect_windows(hp, {0, 0});
    };
    // The 12-token prefill is past the original length, so it must use the long factors.
    c.sensitivity = {{"long factors", [](HParams& hp) {
                        hp.rope_scaling.long_factor = hp.rope_scaling.short_factor;
                      }}};
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "llama3_rope";
    c.inline_json = llama_with(R"({"rope_scaling": {"rope_type": "llama3", "factor": 8.0,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}, "max_position_embeddings": 1024})");
    c.check_hparams = [](const HParams& hp) {
      EXPECT_EQ(hp.rope_scaling.type, frontend::RopeScalingType::kLlama3);
    };
    c.sensitivity = {{"rope scaling", [](HParams& hp) {
                        hp.rope_scaling.type = frontend::RopeScalingType::kNone;
                      }}};
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "linear_rope_biases";
    c.inline_json = llama_with(R"({"rope_scaling": {"rope_type": "linear", "factor": 4.0},
        "attention_bias": true, "mlp_bias": true})");
    c.check_hparams = [](const HParams& hp) {
      EXPECT_EQ(hp.rope_scaling.type, frontend::RopeScalingType::kLinear);
    };
    c.sensitivity = {{"rope scaling", [](HParams& hp) {
                        hp.rope_scaling.type = frontend::RopeScalingType::kNone;
                      }}};
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "yarn_rope";
    // factor = max_position_embeddings / original, so every HF version agrees on the factor.
    c.inline_json = llama_with(R"({"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
        "original_max_position_embeddings": 1024}, "max_position_embeddings": 4096})");
    c.check_hparams = [](const HParams& hp) {
      EXPECT_EQ(hp.rope_scaling.type, frontend::RopeScalingType::kYarn);
    };
    c.sensitivity = {{"rope scaling", [](HParams& hp) {
                        hp.rope_scaling.type = frontend::RopeScalingType::kNone;
                      }}};
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "dynamic_rope";
    // The sequence (12) outgrows max_position_embeddings (8), so the base grows per call.
    c.inline_json = llama_with(R"({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0},
        "max_position_embeddings": 8})");
    c.check_hparams = [](const HParams& hp) {
      EXPECT_EQ(hp.rope_scaling.type, frontend::RopeScalingType::kDynamic);
    };
    c.sensitivity = {{"rope scaling", [](HParams& hp) {
                        hp.rope_scaling.type = frontend::RopeScalingType::kNone;
                      }}};
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "qwen2_swa";
    c.shared_config = "model-configs/Qwen2.5-0.5B-Instruct/config.json";
    c.overrides = small(2, std::nullopt);
    c.overrides.sliding_window = 4;
    c.merge_patch = R"({"use_sliding_window": true, "max_window_layers": 1})";
    c.check_hparams = [](const HParams& hp) {
      expect_windows(hp, {0, 4});  // HF Qwen2: layers i >= max_window_layers slide.
    };
    c.sensitivity = {{"sliding window", no_window}};
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "phi3_partial_sliding";
    // Phi-4-mini-like partial rotary (0.75: 12 of 16 dims), no scaling, and a window that HF's
    // Phi3 applies to every layer.
    c.inline_json = kPhi3Json;
    c.merge_patch = R"({"partial_rotary_factor": 0.75, "rope_scaling": null,
        "sliding_window": 4, "max_position_embeddings": 4096})";
    c.check_hparams = [](const HParams& hp) {
      EXPECT_EQ(hp.rotary_dim, 12);
      expect_windows(hp, {4, 4});
    };
    c.sensitivity = {{"sliding window", no_window}};
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "phi4_mini_tied_longrope";
    // Phi-4-mini's layout (tests/assets/model-configs/Phi-4-mini-instruct): tied embeddings,
    // partial_rotary_factor 0.75 (12 of 16 dims here), LongRoPE past the original length and a
    // sliding_window larger than any context.
    c.inline_json = kPhi3Json;
    c.merge_patch = R"({"partial_rotary_factor": 0.75, "tie_word_embeddings": true,
        "sliding_window": 262144, "rope_scaling": {"type": "longrope",
        "short_factor": [1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        "long_factor": [1.0, 1.5, 3.0, 6.0, 12.0, 24.0]}})";
    c.check_hparams = [](const HParams& hp) {
      EXPECT_EQ(hp.rotary_dim, 12);
      EXPECT_TRUE(hp.tie_word_embeddings);
      EXPECT_EQ(hp.rope_scaling.long_factor.size(), 6u);
    };
    c.sensitivity = {{"long factors", [](HParams& hp) {
                        hp.rope_scaling.long_factor = hp.rope_scaling.short_factor;
                      }}};
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "smollm3_nope";
    c.shared_config = "model-configs-new/SmolLM3-3B/config.json";
    c.overrides = small(4);
    c.check_hparams = [](const HParams& hp) {
      // HF SmolLM3: no_rope_layers [1, 1, 1, 0, ...]: the 4th layer has no RoPE; no windows;
      // tie_word_embeddings defaults to true.
      ASSERT_EQ(hp.layers.size(), 4u);
      for (size_t i = 0; i < 4; ++i) EXPECT_EQ(hp.layers[i].use_rope, i != 3) << "layer " << i;
      expect_windows(hp, {0, 0, 0, 0});
      EXPECT_TRUE(hp.tie_word_embeddings);
      EXPECT_DOUBLE_EQ(hp.rope_theta, 5e6);
    };
    c.sensitivity = {{"NoPE layer", [](HParams& hp) {
                        for (auto& l : hp.layers) l.use_rope = true;
                      }}};
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "smollm3_default_nope_sliding";
    // Without no_rope_layers and layer_types, HF derives both: every 2nd layer (interval 2)
    // has no RoPE, and with use_sliding_window those layers slide.
    c.shared_config = "model-configs-new/SmolLM3-3B/config.json";
    c.overrides = small(4);
    c.overrides.sliding_window = 4;
    c.merge_patch = R"({"no_rope_layers": null, "layer_types": null, "no_rope_layer_interval": 2,
        "use_sliding_window": true})";
    c.check_hparams = [](const HParams& hp) {
      ASSERT_EQ(hp.layers.size(), 4u);
      for (size_t i = 0; i < 4; ++i) EXPECT_EQ(hp.layers[i].use_rope, i % 2 == 0) << "layer " << i;
      expect_windows(hp, {0, 4, 0, 4});
    };
    c.sensitivity = {{"sliding window", no_window}, {"NoPE layers", [](HParams& hp) {
                                                       for (auto& l : hp.layers) l.use_rope = true;
                                                     }}};
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "exaone35";
    // EXAONE 3.5's own keys (num_layers, layer_norm_epsilon, activation_function), llama3 RoPE
    // scaling, no intermediate_size (HF default 4 x hidden) and GPT-2-style tensor names.
    c.inline_json = kExaone35Json;
    c.check_hparams = [](const HParams& hp) {
      EXPECT_EQ(hp.num_hidden_layers, 2);
      EXPECT_EQ(hp.intermediate_size, 4 * 64);
      EXPECT_DOUBLE_EQ(hp.rms_norm_eps, 1e-3);
      EXPECT_TRUE(hp.tie_word_embeddings);  // PretrainedConfig's default
      EXPECT_EQ(hp.rope_scaling.type, frontend::RopeScalingType::kLlama3);
    };
    c.sensitivity = {{"rope scaling",
                      [](HParams& hp) { hp.rope_scaling.type = frontend::RopeScalingType::kNone; }},
                     {"norm eps", [](HParams& hp) { hp.rms_norm_eps = 1.0; }}};
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "exaone4_hybrid";
    // EXAONE 4.0: q/k norms, norms after attention and MLP only, layers 0-2 slide (pattern 4)
    // with RoPE, layer 3 is global without RoPE.
    c.inline_json = kExaone4Json;
    c.check_hparams = [](const HParams& hp) {
      expect_windows(hp, {4, 4, 4, 0});
      ASSERT_EQ(hp.layers.size(), 4u);
      for (size_t i = 0; i < 4; ++i) EXPECT_EQ(hp.layers[i].use_rope, i != 3) << "layer " << i;
      EXPECT_TRUE(hp.qk_norm);
      EXPECT_FALSE(hp.pre_norms);
      EXPECT_TRUE(hp.post_norms);
    };
    // Without windows HF applies RoPE everywhere too, so this flips both features.
    c.sensitivity = {{"windows and global NoPE", no_window}};
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "exaone4_no_window";
    // sliding_window null: every layer global, every layer with RoPE (the 1.2B's layout).
    nlohmann::json j = nlohmann::json::parse(kExaone4Json);
    j["sliding_window"] = nullptr;  // a merge patch would delete the key (HF default: 4096)
    c.inline_json = j.dump(2);
    c.check_hparams = [](const HParams& hp) {
      expect_windows(hp, {0, 0, 0, 0});
      for (const auto& l : hp.layers) EXPECT_TRUE(l.use_rope);
    };
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "cohere2_parallel_layernorm";
    c.inline_json = kCohere2Json;
    c.check_hparams = [](const HParams& hp) {
      expect_windows(hp, {4, 4, 4, 0});
      ASSERT_EQ(hp.layers.size(), 4u);
      for (size_t i = 0; i < 4; ++i) EXPECT_EQ(hp.layers[i].use_rope, i != 3) << "layer " << i;
      EXPECT_EQ(hp.head_dim, 16);
      EXPECT_DOUBLE_EQ(hp.rms_norm_eps, 1e-5);  // layer_norm_eps
      EXPECT_DOUBLE_EQ(hp.logit_scale, 0.25);
      EXPECT_TRUE(hp.tie_word_embeddings);
    };
    c.sensitivity = {{"windows and global NoPE", no_window},
                     {"logit scale", [](HParams& hp) { hp.logit_scale = 1.0; }},
                     {"norm eps", [](HParams& hp) { hp.rms_norm_eps = 1.0; }}};
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "cohere2_attention_bias";
    nlohmann::json j = nlohmann::json::parse(kCohere2Json);
    j["attention_bias"] = true;
    j["sliding_window_pattern"] = 2;
    c.inline_json = j.dump(2);
    c.check_hparams = [](const HParams& hp) {
      expect_windows(hp, {4, 0, 4, 0});
      EXPECT_TRUE(hp.qkv_bias);
      EXPECT_TRUE(hp.o_bias);
    };
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "hyperclovax_mup_peri_ln";
    c.inline_json = kHyperClovaxJson;
    c.check_hparams = [](const HParams& hp) {
      EXPECT_EQ(hp.family, frontend::ModelFamily::kHyperClovax);
      EXPECT_DOUBLE_EQ(hp.embedding_scale, 2.5);
      EXPECT_DOUBLE_EQ(hp.query_scale, 0.125);
      EXPECT_DOUBLE_EQ(hp.residual_multiplier, 0.4);
      EXPECT_DOUBLE_EQ(hp.logit_scale, 0.6);
      EXPECT_TRUE(hp.pre_norms);
      EXPECT_TRUE(hp.post_norms);
    };
    c.sensitivity = {{"embedding multiplier", [](HParams& hp) { hp.embedding_scale = 1.0; }},
                     {"attention multiplier", [](HParams& hp) { hp.query_scale = 0.25; }},
                     {"residual multiplier", [](HParams& hp) { hp.residual_multiplier = 1.0; }},
                     {"logits scaling", [](HParams& hp) { hp.logit_scale = 1.0; }},
                     {"post norms", [](HParams& hp) { hp.post_norms = false; }}};
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "hyperclovax_defaults_biases";
    // Null multipliers take their neutral values (attention: head_dim^-1/2); no post norms;
    // Granite's attention and MLP biases.
    nlohmann::json j = nlohmann::json::parse(kHyperClovaxJson);
    for (const char* k : {"embedding_multiplier", "attention_multiplier", "logits_scaling"})
      j[k] = nullptr;
    j["use_post_norm"] = false;
    j["attention_bias"] = true;
    j["mlp_bias"] = true;
    c.inline_json = j.dump(2);
    c.check_hparams = [](const HParams& hp) {
      EXPECT_DOUBLE_EQ(hp.embedding_scale, 1.0);
      EXPECT_DOUBLE_EQ(hp.query_scale, 0.25);
      EXPECT_DOUBLE_EQ(hp.logit_scale, 1.0);
      EXPECT_DOUBLE_EQ(hp.residual_multiplier, 0.4);
      EXPECT_FALSE(hp.post_norms);
      EXPECT_TRUE(hp.qkv_bias);
      EXPECT_TRUE(hp.o_bias);
      EXPECT_TRUE(hp.mlp_bias);
    };
    c.sensitivity = {{"residual multiplier", [](HParams& hp) { hp.residual_multiplier = 1.0; }}};
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "llama32_shared";
    c.shared_config = "model-configs/Llama-3.2-1B-Instruct/config.json";
    c.overrides = small(2);
    c.check_hparams = [](const HParams& hp) {
      EXPECT_EQ(hp.rope_scaling.type, frontend::RopeScalingType::kLlama3);
      EXPECT_EQ(hp.rope_scaling.original_max_position_embeddings, 8192);
    };
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "yarn_mscale";
    // No original_max_position_embeddings in rope_scaling: HF uses max_position_embeddings.
    c.inline_json = llama_with(R"({"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
        "mscale": 1.0, "mscale_all_dim": 0.5, "beta_fast": 16.0, "beta_slow": 2.0},
        "max_position_embeddings": 2048})");
    c.check_hparams = [](const HParams& hp) {
      EXPECT_EQ(hp.rope_scaling.type, frontend::RopeScalingType::kYarn);
    };
    cases.push_back(c);
  }
  {
    FamilyCase c;
    c.name = "dynamic_rope_orig_key";
    // HF's dynamic NTK ignores rope_scaling.original_max_position_embeddings and grows from
    // config.max_position_embeddings (8 here, exceeded by the 12-token sequence).
    c.inline_json = llama_with(R"({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0,
        "original_max_position_embeddings": 4}, "max_position_embeddings": 8})");
    c.check_hparams = [](const HParams& hp) {
      EXPECT_EQ(hp.rope_scaling.type, frontend::RopeScalingType::kDynamic);
    };
    cases.push_back(c);
  }
  return cases;
}

class Families : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(Families, SessionMatchesNaiveDecoder) {
  const FamilyCase& c = GetParam();
  frontend::RandomModelOptions opt;
  if (!c.shared_config.empty()) {
    QBC_REQUIRE_SHARED(config_path, c.shared_config);
    auto text = frontend::apply_config_overrides(::qbc::testing::read_file(config_path),
                                                 config_path.string(), c.overrides, std::nullopt);
    QBC_ASSERT_OK(text);
    opt.config_json = *text;
  } else {
    opt.config_json = c.inline_json;
  }
  if (!c.merge_patch.empty()) {
    nlohmann::json j = nlohmann::json::parse(opt.config_json);
    j.merge_patch(nlohmann::json::parse(c.merge_patch));
    opt.config_json = j.dump(2);
  }
  opt.output_dir = ::qbc::testing::temp_dir() / c.name;
  opt.seed = 7;
  opt.init_std = c.init_std;
  QBC_ASSERT_OK(frontend::write_random_model(opt));
  auto source = ModelSource::open(opt.output_dir);
  QBC_ASSERT_OK(source);
  const HParams& hp = source->hparams();
  ASSERT_NO_FATAL_FAILURE(c.check_hparams(hp));

  // The graph builder's RoPE parameters against HF's, independently derived.
  for (int64_t l = 0; l < hp.num_hidden_layers; ++l) {
    const numerics::Rope rp = frontend::rope_params(hp, l);
    const NaiveRope short_rope = naive_rope(hp, l, 1);
    ASSERT_EQ(rp.inv_freq.size(), short_rope.inv_freq.size()) << "layer " << l;
    for (size_t i = 0; i < rp.inv_freq.size(); ++i) {
      EXPECT_NEAR(rp.inv_freq[i], short_rope.inv_freq[i], 1e-12 * short_rope.inv_freq[i])
          << "layer " << l << " inv_freq[" << i << "]";
    }
    EXPECT_NEAR(rp.attention_factor, short_rope.attention_factor, 1e-12) << "layer " << l;
    if (hp.rope_scaling.type == frontend::RopeScalingType::kLongRope) {
      const NaiveRope long_rope =
          naive_rope(hp, l, hp.rope_scaling.original_max_position_embeddings + 1);
      ASSERT_EQ(rp.long_inv_freq.size(), long_rope.inv_freq.size());
      for (size_t i = 0; i < rp.long_inv_freq.size(); ++i) {
        EXPECT_NEAR(rp.long_inv_freq[i], long_rope.inv_freq[i], 1e-12 * long_rope.inv_freq[i]);
      }
      EXPECT_EQ(rp.original_max_positions, hp.rope_scaling.original_max_position_embeddings);
    }
    if (hp.rope_scaling.type == frontend::RopeScalingType::kDynamic) {
      EXPECT_DOUBLE_EQ(rp.dynamic_factor, hp.rope_scaling.factor);
      // HF's dynamic NTK grows from config.max_position_embeddings.
      EXPECT_EQ(rp.original_max_positions, hp.max_position_embeddings);
    }
  }

  const std::vector<int32_t> tokens = test_tokens(c.seq_len, hp.vocab_size, 11);
  // The naive decoder reads the tensors as stored (HF's layout: Cohere2's q/k rows interleaved).
  auto ckpt = frontend::SafetensorsCheckpoint::open(opt.output_dir);
  QBC_ASSERT_OK(ckpt);
  auto naive = NaiveDecoder::create(hp, stored_weights_of(*ckpt));
  QBC_ASSERT_OK(naive);
  const char* const kinds[] = {"prefill", "decode", "chunked"};
  std::vector<std::vector<double>> want;
  double scale = 0.0;
  for (const char* kind : kinds) {
    want.push_back(naive_run(**naive, tokens, schedule(kind, tokens.size(), c.prefill)));
    scale = std::max(scale, max_abs(want.back()));
  }
  ASSERT_GT(scale, 0.05) << "logits too small to be a meaningful check";

  // Each feature under test must matter for these inputs.
  for (const auto& [what, mutate] : c.sensitivity) {
    HParams changed = hp;
    mutate(changed);
    auto other = NaiveDecoder::create(changed, stored_weights_of(*ckpt));
    QBC_ASSERT_OK(other);
    EXPECT_GT(rel_error(naive_run(**other, tokens, {tokens.size()}), want[0]), 1e-3)
        << what << " does not change the logits of " << c.name;
  }

  auto graph = frontend::build_decoder_graph(hp, frontend::ImportOptions{64});
  QBC_ASSERT_OK(graph);
  const ir::WeightReader reader = [&](const ir::Weight& w, std::vector<float>* out) {
    return source->read_f32(w.tensor, out);
  };
  std::string report = c.name + ": max|logit| " + std::to_string(scale);
  for (const bool f64 : {false, true}) {
    SessionOptions so;
    so.float64 = f64;
    auto session = Session::create(*graph, reader, so);
    QBC_ASSERT_OK(session);
    // float32: relative to max(1, max|logit|); float64: beyond the float32 rounding of the
    // returned logits.
    const double tol = f64 ? 1e-9 : 1e-4;
    for (size_t k = 0; k < 3; ++k) {
      std::vector<float> got;
      QBC_ASSERT_OK(
          session_run(**session, tokens, schedule(kinds[k], tokens.size(), c.prefill), &got));
      ASSERT_EQ(got.size(), want[k].size());
      const double err = f64 ? rel_excess_over_f32_rounding(got, want[k]) : rel_error(got, want[k]);
      const std::string label = std::string(f64 ? "f64_" : "f32_") + kinds[k];
      RecordProperty(label + "_rel_err", std::to_string(err));
      char buf[64];
      std::snprintf(buf, sizeof buf, ", %s %.2e", label.c_str(), err);
      report += buf;
      EXPECT_LE(err, tol) << c.name << " " << label;
    }
  }
  std::printf("[families] %s\n", report.c_str());
}

INSTANTIATE_TEST_SUITE_P(All, Families, ::testing::ValuesIn(family_cases()),
                         [](const ::testing::TestParamInfo<FamilyCase>& i) {
                           return i.param.name;
                         });

// Cohere2's q/k rows: the source reads them in the rotate_half order (and only them), and that
// reordering is what makes the graph's rope HF's interleaved one: the stored order is not.
TEST(Cohere2RopeRows, ReorderedOnReadAndNeeded) {
  frontend::RandomModelOptions opt;
  opt.config_json = kCohere2Json;
  opt.output_dir = ::qbc::testing::temp_dir() / "cohere2_rope_rows";
  opt.seed = 7;
  opt.init_std = 0.2;
  QBC_ASSERT_OK(frontend::write_random_model(opt));
  auto source = ModelSource::open(opt.output_dir);
  QBC_ASSERT_OK(source);
  auto ckpt = frontend::SafetensorsCheckpoint::open(opt.output_dir);
  QBC_ASSERT_OK(ckpt);
  const HParams& hp = source->hparams();
  for (const char* proj : {"q_proj", "k_proj", "v_proj"}) {
    const std::string name = std::string("model.layers.0.self_attn.") + proj + ".weight";
    const frontend::TensorInfo* t = source->find(name);
    ASSERT_NE(t, nullptr) << name;
    const bool reordered = std::string(proj) != "v_proj";
    EXPECT_EQ(t->transform == frontend::TensorTransform::kUnpermuteRopeRows, reordered) << name;
    // HF row 2j + i of each head (pair j, element i) is read as row i * head_dim/2 + j.
    std::vector<float> stored, read;
    QBC_ASSERT_OK(ckpt->read_f32(name, &stored));
    QBC_ASSERT_OK(source->read_f32(name, &read));
    const int64_t hd = hp.head_dim, h = hp.hidden_size;
    for (int64_t j = 0; j < hd / 2; ++j) {
      for (int64_t i = 0; i < 2; ++i) {
        const int64_t from = reordered ? 2 * j + i : i * hd / 2 + j;
        EXPECT_EQ(read[static_cast<size_t>((hd + i * hd / 2 + j) * h)],
                  stored[static_cast<size_t>((hd + from) * h)])
            << name << " head 1 pair " << j << " element " << i;
      }
    }
  }
  const std::vector<int32_t> tokens = test_tokens(12, hp.vocab_size, 11);
  auto naive = NaiveDecoder::create(hp, stored_weights_of(*ckpt));
  QBC_ASSERT_OK(naive);
  const std::vector<double> want = naive_run(**naive, tokens, {tokens.size()});
  auto graph = frontend::build_decoder_graph(hp, frontend::ImportOptions{64});
  QBC_ASSERT_OK(graph);
  double err[2] = {0, 0};
  for (const bool as_stored : {false, true}) {
    const ir::WeightReader reader = [&](const ir::Weight& w, std::vector<float>* out) {
      return as_stored ? ckpt->read_f32(w.tensor, out) : source->read_f32(w.tensor, out);
    };
    SessionOptions so;
    so.float64 = true;
    auto session = Session::create(*graph, reader, so);
    QBC_ASSERT_OK(session);
    std::vector<float> got;
    QBC_ASSERT_OK(session_run(**session, tokens, {tokens.size()}, &got));
    err[as_stored] = rel_excess_over_f32_rounding(got, want);
  }
  EXPECT_LE(err[0], 1e-9);
  EXPECT_GT(err[1], 1e-3) << "the stored q/k row order gives the same logits";
}

/// Reads `n` float32 values.
std::vector<float> read_f32_file(const fs::path& path, size_t n) {
  std::vector<float> v(n);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(float)));
  if (!in) v.clear();
  return v;
}

// The naive decoder alone against llama.cpp's exact-F32 logits of stories260K (Llama, GQA).
TEST(NaiveDecoder, MatchesStoriesGoldens) {
  QBC_REQUIRE_SHARED(model_dir, "models/stories260k/hf");
  QBC_REQUIRE_SHARED(golden_dir, "models/stories260k/golden");
  auto source = ModelSource::open(model_dir);
  QBC_ASSERT_OK(source);
  auto naive = NaiveDecoder::create(source->hparams(), weights_of(*source));
  QBC_ASSERT_OK(naive);
  const nlohmann::json golden =
      nlohmann::json::parse(::qbc::testing::read_file(golden_dir / "logits_golden.json"));
  const int64_t vocab = golden.at("n_vocab").get<int64_t>();
  ASSERT_EQ(vocab, source->hparams().vocab_size);
  int checked = 0;
  for (const nlohmann::json& seq : golden.at("sequences")) {
    const std::string name = seq.at("name").get<std::string>();
    const std::vector<int32_t> ids = seq.at("ids").get<std::vector<int32_t>>();
    const std::vector<float> want = read_f32_file(
        golden_dir / seq.at("all_logits_file").get<std::string>(), ids.size() * vocab);
    ASSERT_EQ(want.size(), ids.size() * vocab) << name;
    std::vector<double> want_d(want.begin(), want.end());
    // Whole-sequence prefill, and prefill of 3 tokens then token-by-token decode.
    for (const size_t prefill : {ids.size(), size_t{3}}) {
      const std::vector<double> got =
          naive_run(**naive, ids, schedule("decode", ids.size(), prefill));
      ASSERT_EQ(got.size(), want.size());
      double err = 0.0;
      for (size_t i = 0; i < got.size(); ++i) err = std::max(err, std::abs(got[i] - want_d[i]));
      std::printf("[families] stories260k %s prefill %zu: max|dlogit| %.2e (max|logit| %.2f)\n",
                  name.c_str(), prefill, err, max_abs(want_d));
      EXPECT_LE(err, 1e-4) << name << " prefill " << prefill;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

}  // namespace
}  // namespace qbc::ref::testing
