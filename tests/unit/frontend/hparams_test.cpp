// Tests for config.json → HParams: the shared real configs, synthetic configs for the families
// and options the shared set lacks, and one test per validation error.
#include "qbc/frontend/hparams.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "support/test_support.h"

namespace qbc::frontend {
namespace {

HParams load_shared(const std::filesystem::path& path) {
  auto hp = load_hparams(path);
  EXPECT_TRUE(hp.ok()) << hp.status().to_string();
  return hp.ok() ? *hp : HParams{};
}

#define LOAD_SHARED_OR_SKIP(var, name)                                  \
  QBC_REQUIRE_SHARED(var##_path, "model-configs/" name "/config.json"); \
  const HParams var = load_shared(var##_path)

// Published totals (model cards / safetensors metadata); tied weights counted once.
struct PublishedSize {
  const char* dir;
  double params;
};
constexpr PublishedSize kPublished[] = {
    {"Llama-3.2-1B-Instruct", 1.236e9},
    {"Llama-3.2-3B-Instruct", 3.21e9},
    {"Llama-3.1-8B-Instruct", 8.030e9},
    {"Mistral-7B-Instruct-v0.3", 7.248e9},
    {"Qwen2.5-0.5B-Instruct", 0.494e9},
    {"Qwen2.5-1.5B-Instruct", 1.54e9},
    {"Qwen2.5-3B-Instruct", 3.09e9},
    {"Qwen2.5-7B-Instruct", 7.61e9},
    {"Qwen3-0.6B", 0.596e9},
    {"SmolLM2-135M-Instruct", 134.5e6},
    {"gemma-2-2b-it", 2.614e9},
};

TEST(HParams, EverySharedConfigParses) {
  QBC_REQUIRE_SHARED(dir, "model-configs");
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const auto path = entry.path() / "config.json";
    if (!std::filesystem::exists(path)) continue;
    auto hp = load_hparams(path);
    ASSERT_TRUE(hp.ok()) << hp.status().to_string();
    EXPECT_EQ(hp->layers.size(), static_cast<size_t>(hp->num_hidden_layers)) << path;
    EXPECT_GT(hp->param_counts().total(), 0) << path;
    ++count;
  }
  EXPECT_EQ(count, 13);
}

TEST(HParams, TotalsMatchPublishedSizes) {
  QBC_REQUIRE_SHARED(dir, "model-configs");
  for (const PublishedSize& p : kPublished) {
    auto hp = load_hparams(dir / p.dir / "config.json");
    ASSERT_TRUE(hp.ok()) << hp.status().to_string();
    const double total = static_cast<double>(hp->param_counts().total());
    EXPECT_NEAR(total / p.params, 1.0, 0.01) << p.dir << ": " << total;
  }
  // Qwen3 cards give non-embedding counts: 1.4B and 3.6B.
  const std::pair<const char*, double> qwen3[] = {{"Qwen3-1.7B", 1.4e9}, {"Qwen3-4B", 3.6e9}};
  for (const auto& [name, non_embedding] : qwen3) {
    auto hp = load_hparams(dir / name / "config.json");
    ASSERT_TRUE(hp.ok()) << hp.status().to_string();
    const ParamCounts c = hp->param_counts();
    EXPECT_NEAR(static_cast<double>(c.total() - c.embedding) / non_embedding, 1.0, 0.01) << name;
  }
}

TEST(HParams, Llama32_1B) {
  LOAD_SHARED_OR_SKIP(hp, "Llama-3.2-1B-Instruct");
  EXPECT_EQ(hp.family, ModelFamily::kLlama);
  EXPECT_EQ(hp.architecture, "LlamaForCausalLM");
  EXPECT_EQ(hp.num_hidden_layers, 16);
  EXPECT_EQ(hp.num_attention_heads, 32);
  EXPECT_EQ(hp.num_key_value_heads, 8);
  EXPECT_EQ(hp.head_dim, 64);
  EXPECT_TRUE(hp.tie_word_embeddings);
  EXPECT_EQ(hp.rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_DOUBLE_EQ(hp.rope_scaling.factor, 32.0);
  EXPECT_DOUBLE_EQ(hp.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(hp.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(hp.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(hp.rope_theta, 500000.0);
  EXPECT_TRUE(hp.layers[0].rope_scaled);
  EXPECT_EQ(hp.layers[15].sliding_window, 0);
  EXPECT_EQ(hp.activation, Activation::kSilu);
  EXPECT_EQ(hp.norm_style, NormStyle::kWeight);
  EXPECT_FALSE(hp.qkv_bias || hp.o_bias || hp.mlp_bias || hp.qk_norm);
  EXPECT_DOUBLE_EQ(hp.query_scale, 1.0 / 8.0);
  EXPECT_EQ(hp.bos_token_id, 128000);
  EXPECT_EQ(hp.eos_token_ids, std::vector<int64_t>{128001});
  EXPECT_EQ(hp.torch_dtype, "bfloat16");
  const ParamCounts c = hp.param_counts();
  EXPECT_EQ(c.embedding, 128256LL * 2048);
  EXPECT_EQ(c.head, 0);
  EXPECT_EQ(c.attention_per_block, 2048LL * 2048 * 2 + 2048LL * 512 * 2);
  EXPECT_EQ(c.mlp_per_block, 3LL * 2048 * 8192);
  EXPECT_EQ(c.norms(), 16 * 2 * 2048 + 2048);
  EXPECT_EQ(c.total(), 1235814400);
  EXPECT_EQ(c.total_bytes(16), 2 * 1235814400LL);
}

TEST(HParams, Qwen25HasQkvBias) {
  LOAD_SHARED_OR_SKIP(hp, "Qwen2.5-0.5B-Instruct");
  EXPECT_EQ(hp.family, ModelFamily::kQwen2);
  EXPECT_TRUE(hp.qkv_bias);
  EXPECT_FALSE(hp.o_bias);
  EXPECT_EQ(hp.head_dim, 64);  // 896 / 14
  EXPECT_EQ(hp.num_key_value_heads, 2);
  // use_sliding_window is false, so no layer slides despite sliding_window = 32768.
  for (const auto& layer : hp.layers) EXPECT_EQ(layer.sliding_window, 0);
  EXPECT_EQ(hp.rope_scaling.type, RopeScalingType::kNone);
  EXPECT_EQ(hp.param_counts().total(), 494032768);
}

TEST(HParams, Qwen3HasQkNorm) {
  LOAD_SHARED_OR_SKIP(hp, "Qwen3-0.6B");
  EXPECT_EQ(hp.family, ModelFamily::kQwen3);
  EXPECT_TRUE(hp.qk_norm);
  EXPECT_FALSE(hp.qkv_bias);
  EXPECT_EQ(hp.head_dim, 128);
  EXPECT_EQ(hp.q_dim(), 2048);  // wider than hidden_size 1024
  EXPECT_EQ(hp.param_counts().norms_per_block, 2 * 1024 + 2 * 128);
  EXPECT_EQ(hp.param_counts().total(), 596049920);
}

TEST(HParams, Gemma2) {
  LOAD_SHARED_OR_SKIP(hp, "gemma-2-2b-it");
  EXPECT_EQ(hp.family, ModelFamily::kGemma2);
  EXPECT_DOUBLE_EQ(hp.attn_logit_softcap, 50.0);
  EXPECT_DOUBLE_EQ(hp.final_logit_softcap, 30.0);
  EXPECT_DOUBLE_EQ(hp.query_scale, 1.0 / 16.0);  // query_pre_attn_scalar 256
  EXPECT_DOUBLE_EQ(hp.embedding_scale, std::sqrt(2304.0));
  EXPECT_EQ(hp.norm_style, NormStyle::kOnePlusWeight);
  EXPECT_EQ(hp.activation, Activation::kGeluTanh);
  EXPECT_TRUE(hp.post_norms);
  EXPECT_TRUE(hp.tie_word_embeddings);
  EXPECT_EQ(hp.head_dim, 256);
  ASSERT_EQ(hp.layers.size(), 26u);
  for (size_t i = 0; i < hp.layers.size(); ++i) {
    EXPECT_EQ(hp.layers[i].sliding_window, i % 2 == 0 ? 4096 : 0) << i;
  }
  EXPECT_EQ(hp.eos_token_ids, std::vector<int64_t>{1});
  EXPECT_EQ(hp.param_counts().norms_per_block, 4 * 2304);
  EXPECT_EQ(hp.torch_dtype, "float32");
}

TEST(HParams, MistralNullWindowAndUntiedHead) {
  LOAD_SHARED_OR_SKIP(hp, "Mistral-7B-Instruct-v0.3");
  EXPECT_EQ(hp.family, ModelFamily::kMistral);
  for (const auto& layer : hp.layers) EXPECT_EQ(layer.sliding_window, 0);
  EXPECT_FALSE(hp.tie_word_embeddings);
  EXPECT_EQ(hp.param_counts().head, 32768LL * 4096);
}

TEST(HParams, SmolLm2) {
  LOAD_SHARED_OR_SKIP(hp, "SmolLM2-135M-Instruct");
  EXPECT_EQ(hp.num_hidden_layers, 30);
  EXPECT_EQ(hp.num_key_value_heads, 3);
  EXPECT_EQ(hp.param_counts().total(), 134515008);
}

// --- Synthetic configs --------------------------------------------------------------------

using Json = nlohmann::json;

Json tiny_llama() {
  return Json{{"architectures", {"LlamaForCausalLM"}},
              {"hidden_size", 64},
              {"intermediate_size", 128},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"vocab_size", 256},
              {"rms_norm_eps", 1e-5},
              {"torch_dtype", "float32"}};
}

StatusOr<HParams> parse(const Json& j) { return parse_hparams(j.dump(2), "test/config.json"); }

HParams parse_ok(const Json& j) {
  auto hp = parse(j);
  EXPECT_TRUE(hp.ok()) << hp.status().to_string();
  return hp.ok() ? *hp : HParams{};
}

// Expects `j` to fail with `code` and a message naming the file and every string in `parts`.
void expect_error(const Json& j, Code code, std::initializer_list<const char*> parts) {
  auto hp = parse(j);
  ASSERT_FALSE(hp.ok()) << j.dump();
  EXPECT_EQ(hp.status().code(), code) << hp.status().to_string();
  const std::string msg = hp.status().message();
  EXPECT_NE(msg.find("test/config.json"), std::string::npos) << msg;
  for (const char* part : parts) EXPECT_NE(msg.find(part), std::string::npos) << msg;
}

TEST(HParams, LlamaDefaults) {
  const HParams hp = parse_ok(tiny_llama());
  EXPECT_EQ(hp.head_dim, 16);
  EXPECT_EQ(hp.rotary_dim, 16);
  EXPECT_FALSE(hp.tie_word_embeddings);  // LlamaConfig default
  EXPECT_DOUBLE_EQ(hp.rope_theta, 10000.0);
  EXPECT_EQ(hp.max_position_embeddings, 2048);
  EXPECT_FALSE(hp.bos_token_id.has_value());
  EXPECT_TRUE(hp.eos_token_ids.empty());
  Json j = tiny_llama();
  j.erase("num_key_value_heads");
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  j["eos_token_id"] = {128001, 128008, 128009};
  const HParams hp2 = parse_ok(j);
  EXPECT_EQ(hp2.num_key_value_heads, 4);
  EXPECT_TRUE(hp2.qkv_bias && hp2.o_bias && hp2.mlp_bias);
  EXPECT_EQ(hp2.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(hp2.param_counts().attention_per_block, 4 * 64 * 64 + 64 * 3 + 64);
  EXPECT_EQ(hp2.param_counts().mlp_per_block, 3 * 64 * 128 + 2 * 128 + 64);
}

TEST(HParams, RopeScalingVariants) {
  Json j = tiny_llama();
  j["max_position_embeddings"] = 4096;
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_EQ(parse_ok(j).rope_scaling.type, RopeScalingType::kLinear);
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 4.0}};
  HParams hp = parse_ok(j);
  EXPECT_EQ(hp.rope_scaling.type, RopeScalingType::kDynamic);
  EXPECT_EQ(hp.rope_scaling.original_max_position_embeddings, 4096);
  j["rope_scaling"] = {{"rope_type", "yarn"},
                       {"factor", 4.0},
                       {"original_max_position_embeddings", 1024},
                       {"beta_fast", 16}};
  hp = parse_ok(j);
  EXPECT_EQ(hp.rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_DOUBLE_EQ(hp.rope_scaling.beta_fast, 16.0);
  EXPECT_DOUBLE_EQ(hp.rope_scaling.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(hp.rope_scaling.attention_factor, 0.1 * std::log(4.0) + 1.0);
  j["rope_scaling"]["attention_factor"] = 1.5;
  EXPECT_DOUBLE_EQ(parse_ok(j).rope_scaling.attention_factor, 1.5);
  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(parse_ok(j).rope_scaling.type, RopeScalingType::kNone);
  j["rope_scaling"] = nullptr;
  EXPECT_FALSE(parse_ok(j).layers[0].rope_scaled);
}

TEST(HParams, Qwen2SlidingWindowLayers) {
  Json j = tiny_llama();
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["num_hidden_layers"] = 4;
  j["use_sliding_window"] = true;
  j["sliding_window"] = 128;
  j["max_window_layers"] = 2;
  const HParams hp = parse_ok(j);
  EXPECT_EQ(hp.layers[1].sliding_window, 0);
  EXPECT_EQ(hp.layers[2].sliding_window, 128);
  EXPECT_EQ(hp.layers[3].sliding_window, 128);
  j["layer_types"] = {"sliding_attention", "full_attention", "full_attention", "full_attention"};
  const HParams hp2 = parse_ok(j);
  EXPECT_EQ(hp2.layers[0].sliding_window, 128);
  EXPECT_EQ(hp2.layers[3].sliding_window, 0);
}

Json tiny_gemma3() {
  Json j = tiny_llama();
  j["architectures"] = {"Gemma3ForCausalLM"};
  j["num_hidden_layers"] = 7;
  j["head_dim"] = 32;
  j["query_pre_attn_scalar"] = 64;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  j["sliding_window"] = 512;
  return j;
}

TEST(HParams, Gemma3PatternAndLocalRope) {
  const HParams hp = parse_ok(tiny_gemma3());
  EXPECT_EQ(hp.family, ModelFamily::kGemma3);
  EXPECT_TRUE(hp.qk_norm && hp.post_norms);
  EXPECT_TRUE(hp.tie_word_embeddings);  // Gemma3TextConfig default
  EXPECT_DOUBLE_EQ(hp.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(hp.query_scale, 1.0 / 8.0);
  EXPECT_DOUBLE_EQ(hp.attn_logit_softcap, 0.0);
  EXPECT_DOUBLE_EQ(hp.final_logit_softcap, 0.0);
  for (int i = 0; i < 7; ++i) {
    const bool global = i == 5;  // sliding_window_pattern 6: every 6th layer is global
    EXPECT_EQ(hp.layers[i].sliding_window, global ? 0 : 512) << i;
    EXPECT_DOUBLE_EQ(hp.layers[i].rope_theta, global ? 1e6 : 10000.0) << i;
    EXPECT_EQ(hp.layers[i].rope_scaled, global) << i;
  }
  EXPECT_EQ(hp.param_counts().norms_per_block, 4 * 64 + 2 * 32);
}

TEST(HParams, Gemma3MultimodalReadsTextConfig) {
  Json text = tiny_gemma3();
  text.erase("architectures");
  text.erase("vocab_size");  // falls back to the Gemma3TextConfig default
  Json j = {{"architectures", {"Gemma3ForConditionalGeneration"}},
            {"text_config", text},
            {"vision_config", {{"hidden_size", 1152}}},
            {"eos_token_id", {1, 106}}};
  const HParams hp = parse_ok(j);
  EXPECT_EQ(hp.family, ModelFamily::kGemma3);
  EXPECT_EQ(hp.hidden_size, 64);
  EXPECT_EQ(hp.vocab_size, 262208);
  EXPECT_EQ(hp.eos_token_ids, (std::vector<int64_t>{1, 106}));
  j["text_config"]["hidden_size"] = "64";
  expect_error(j, Code::kInvalidArgument, {"text_config.hidden_size", "integer"});
}

// Qwen2.5-VL-3B-Instruct's language model (its config.json, model card: 36 layers, 2048 wide,
// 16 heads, 2 KV heads, tied embeddings) with M-RoPE [16, 24, 24] over head_dim 128.
TEST(HParams, Qwen25VlReadsLanguageModelWithMrope) {
  QBC_REQUIRE_SHARED(path, "model-configs-new/Qwen2.5-VL-3B-Instruct/config.json");
  const HParams hp = load_shared(path);
  EXPECT_EQ(hp.architecture, "Qwen2_5_VLForConditionalGeneration");
  EXPECT_EQ(hp.family, ModelFamily::kQwen2);
  EXPECT_EQ(hp.num_hidden_layers, 36);
  EXPECT_EQ(hp.hidden_size, 2048);
  EXPECT_EQ(hp.intermediate_size, 11008);
  EXPECT_EQ(hp.num_attention_heads, 16);
  EXPECT_EQ(hp.num_key_value_heads, 2);
  EXPECT_EQ(hp.head_dim, 128);
  EXPECT_EQ(hp.vocab_size, 151936);
  EXPECT_TRUE(hp.tie_word_embeddings);
  EXPECT_TRUE(hp.qkv_bias);
  EXPECT_FALSE(hp.o_bias);
  EXPECT_EQ(hp.rope_theta, 1000000.0);
  EXPECT_EQ(hp.rope_scaling.type, RopeScalingType::kNone);  // "type": "mrope" is HF's default
  EXPECT_EQ(hp.mrope_section, (std::vector<int64_t>{16, 24, 24}));
  EXPECT_FALSE(hp.is_sliding(35));  // use_sliding_window false
  // Qwen2.5-VL-3B: 3.75B parameters in all, of which the ViT + merger is 0.67B.
  EXPECT_NEAR(static_cast<double>(hp.param_counts().total()), 3.09e9, 0.01e9);
}

Json tiny_qwen2_vl() {
  Json j = tiny_llama();
  j["architectures"] = {"Qwen2VLForConditionalGeneration"};
  j["model_type"] = "qwen2_vl";
  j["rope_scaling"] = {{"type", "mrope"}, {"mrope_section", {2, 3, 3}}};  // head_dim 16
  j["vision_config"] = {{"depth", 2}, {"embed_dim", 32}};
  return j;
}

TEST(HParams, Qwen2VlTopLevelOrTextConfig) {
  const HParams flat = parse_ok(tiny_qwen2_vl());
  EXPECT_EQ(flat.family, ModelFamily::kQwen2);
  EXPECT_EQ(flat.mrope_section, (std::vector<int64_t>{2, 3, 3}));
  EXPECT_EQ(flat.hidden_size, 64);
  // transformers >= 4.53 nests the text keys under text_config; they win over the top level.
  Json nested = tiny_qwen2_vl();
  Json text = {{"hidden_size", 32},
               {"num_attention_heads", 2},
               {"rope_scaling", {{"rope_type", "default"}, {"mrope_section", {4, 2, 2}}}}};
  nested["text_config"] = text;
  const HParams hp = parse_ok(nested);
  EXPECT_EQ(hp.hidden_size, 32);
  EXPECT_EQ(hp.head_dim, 16);
  EXPECT_EQ(hp.num_hidden_layers, 2);  // from the top level
  EXPECT_EQ(hp.mrope_section, (std::vector<int64_t>{4, 2, 2}));
}

TEST(HParams, Qwen2VlMropeSectionErrors) {
  Json j = tiny_qwen2_vl();
  j["rope_scaling"]["mrope_section"] = {2, 3, 4};
  expect_error(j, Code::kInvalidArgument, {"rope_scaling.mrope_section", "sums to 9", "8"});
  j["rope_scaling"]["mrope_section"] = {4, 4};
  expect_error(j, Code::kInvalidArgument, {"rope_scaling.mrope_section", "3 integers"});
  j["rope_scaling"].erase("mrope_section");
  expect_error(j, Code::kNotFound, {"rope_scaling.mrope_section"});
  j.erase("rope_scaling");
  expect_error(j, Code::kNotFound, {"rope_scaling"});
  Json y = tiny_qwen2_vl();
  y["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}, {"mrope_section", {2, 3, 3}}};
  expect_error(y, Code::kUnimplemented, {"rope_scaling", "M-RoPE with linear"});
  Json t = tiny_qwen2_vl();
  t["model_type"] = "qwen2_5_vl";  // Qwen2VL architecture with the 2.5 model_type
  expect_error(t, Code::kUnimplemented, {"model_type", "qwen2_5_vl"});
}

// Qwen3-VL: transformers' Qwen3VLTextRotaryEmbedding always interleaves (it never reads
// mrope_interleaved) and defaults mrope_section to [24, 20, 20] (head_dim 128).
TEST(HParams, Qwen3VlAlwaysInterleavesAndDefaultsItsSections) {
  Json j = {{"architectures", {"Qwen3VLForConditionalGeneration"}},
            {"model_type", "qwen3_vl"},
            {"text_config",
             {{"hidden_size", 256},
              {"intermediate_size", 512},
              {"num_hidden_layers", 2},
              {"num_attention_heads", 2},
              {"num_key_value_heads", 1},
              {"head_dim", 128},
              {"vocab_size", 1000},
              {"rms_norm_eps", 1e-6},
              {"rope_theta", 5000000},
              {"rope_scaling",
               {{"rope_type", "default"},
                {"mrope_section", {24, 20, 20}},
                {"mrope_interleaved", false}}}}}};
  HParams hp = parse_ok(j);
  EXPECT_TRUE(hp.mrope_interleaved);  // the flag says false; the model interleaves anyway
  EXPECT_TRUE(hp.qk_norm);
  EXPECT_EQ(hp.mrope_section, (std::vector<int64_t>{24, 20, 20}));
  j["text_config"]["rope_scaling"].erase("mrope_section");
  hp = parse_ok(j);
  EXPECT_EQ(hp.mrope_section, (std::vector<int64_t>{24, 20, 20}));
  j["text_config"].erase("rope_scaling");
  hp = parse_ok(j);
  EXPECT_TRUE(hp.mrope_interleaved);
  EXPECT_EQ(hp.mrope_section, (std::vector<int64_t>{24, 20, 20}));
  j["text_config"]["head_dim"] = 64;
  expect_error(j, Code::kInvalidArgument, {"no mrope_section", "head_dim 128", "64"});
}

TEST(HParams, Phi3FusedAndLongRope) {
  Json j = tiny_llama();
  j["architectures"] = {"Phi3ForCausalLM"};
  j["partial_rotary_factor"] = 0.5;
  j["max_position_embeddings"] = 8192;
  j["original_max_position_embeddings"] = 1024;
  j["rope_scaling"] = {{"type", "longrope"},
                       {"short_factor", {1.0, 1.0, 1.0, 1.0}},
                       {"long_factor", {1.0, 2.0, 3.0, 4.0}}};
  const HParams hp = parse_ok(j);
  EXPECT_EQ(hp.family, ModelFamily::kPhi3);
  EXPECT_TRUE(hp.fused_qkv && hp.fused_gate_up);
  EXPECT_EQ(hp.rotary_dim, 8);
  EXPECT_EQ(hp.rope_scaling.type, RopeScalingType::kLongRope);
  EXPECT_DOUBLE_EQ(hp.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(hp.rope_scaling.attention_factor,
                   std::sqrt(1.0 + std::log(8.0) / std::log(1024.0)));
  j["rope_scaling"]["long_factor"] = {1.0};
  expect_error(j, Code::kInvalidArgument, {"rope_scaling", "long_factor"});
}

// --- Validation errors ----------------------------------------------------------------------

// SmolLM3-3B (the published config): NoPE on every 4th layer, tied embeddings by default.
TEST(HParams, SmolLm3NoPeEveryFourthLayer) {
  QBC_REQUIRE_SHARED(path, "model-configs-new/SmolLM3-3B/config.json");
  const HParams hp = load_shared(path);
  EXPECT_EQ(hp.family, ModelFamily::kSmolLM3);
  ASSERT_EQ(hp.layers.size(), 36u);
  for (size_t i = 0; i < 36; ++i) {
    EXPECT_EQ(hp.layers[i].use_rope, (i + 1) % 4 != 0) << i;
    EXPECT_EQ(hp.layers[i].sliding_window, 0) << i;
  }
  EXPECT_TRUE(hp.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(hp.rope_theta, 5e6);
  // 3.08B parameters (model card: 3B; embeddings tied).
  EXPECT_NEAR(static_cast<double>(hp.param_counts().total()), 3.075e9, 0.01e9);
}

HParams load_asset(const char* name) {
  return load_shared(qbc::testing::source_dir() / "tests/assets/model-configs" / name /
                     "config.json");
}

// The configs stored with the tests (tests/assets/model-configs/README.md names the sources).
TEST(HParams, Phi4MiniPartialRotaryTied) {
  const HParams hp = load_asset("Phi-4-mini-instruct");
  EXPECT_EQ(hp.family, ModelFamily::kPhi3);
  EXPECT_EQ(hp.head_dim, 128);
  EXPECT_EQ(hp.rotary_dim, 96);  // partial_rotary_factor 0.75
  EXPECT_TRUE(hp.tie_word_embeddings);
  EXPECT_EQ(hp.rope_scaling.type, RopeScalingType::kLongRope);
  EXPECT_EQ(hp.rope_scaling.long_factor.size(), 48u);
  // 3.84B parameters (model card: 3.8B).
  EXPECT_NEAR(static_cast<double>(hp.param_counts().total()), 3.836e9, 0.01e9);
}

TEST(HParams, Exaone35OwnKeysAndNames) {
  const HParams hp = load_asset("EXAONE-3.5-2.4B-Instruct");
  EXPECT_EQ(hp.family, ModelFamily::kExaone);
  EXPECT_EQ(hp.num_hidden_layers, 30);  // num_layers
  EXPECT_DOUBLE_EQ(hp.rms_norm_eps, 1e-5);  // layer_norm_epsilon
  EXPECT_EQ(hp.head_dim, 80);
  EXPECT_TRUE(hp.tie_word_embeddings);
  EXPECT_EQ(hp.rope_scaling.type, RopeScalingType::kLlama3);
}

TEST(HParams, Exaone4HybridNoPeGlobalLayers) {
  const HParams hp = load_asset("EXAONE-4.0-32B");
  EXPECT_EQ(hp.family, ModelFamily::kExaone4);
  ASSERT_EQ(hp.layers.size(), 64u);
  for (size_t i = 0; i < 64; ++i) {
    const bool global = (i + 1) % 4 == 0;  // "LLLG"
    EXPECT_EQ(hp.layers[i].sliding_window, global ? 0 : 4096) << i;
    EXPECT_EQ(hp.layers[i].use_rope, !global) << i;
  }
  EXPECT_TRUE(hp.qk_norm);
  EXPECT_FALSE(hp.pre_norms);
  EXPECT_TRUE(hp.post_norms);
  // 32.0B parameters (model card: 32.0B).
  EXPECT_NEAR(static_cast<double>(hp.param_counts().total()), 32.0e9, 0.1e9);
}

// Command R7B (tests/assets/model-configs/README.md gives the sources of its config).
TEST(HParams, Cohere2CommandR7B) {
  const HParams hp = load_asset("c4ai-command-r7b-12-2024");
  EXPECT_EQ(hp.family, ModelFamily::kCohere2);
  EXPECT_EQ(family_name(hp.family), "cohere2");
  ASSERT_EQ(hp.layers.size(), 32u);
  for (size_t i = 0; i < 32; ++i) {
    const bool global = (i + 1) % 4 == 0;  // sliding_window_pattern 4
    EXPECT_EQ(hp.layers[i].sliding_window, global ? 0 : 4096) << i;
    EXPECT_EQ(hp.layers[i].use_rope, !global) << i;
    EXPECT_DOUBLE_EQ(hp.layers[i].rope_theta, 50000.0) << i;
  }
  EXPECT_EQ(hp.head_dim, 128);
  EXPECT_TRUE(hp.layer_norm);
  EXPECT_TRUE(hp.parallel_block);
  EXPECT_TRUE(hp.rope_interleaved);
  EXPECT_FALSE(hp.qkv_bias);
  EXPECT_DOUBLE_EQ(hp.logit_scale, 0.25);
  EXPECT_DOUBLE_EQ(hp.rms_norm_eps, 1e-5);  // layer_norm_eps
  EXPECT_TRUE(hp.tie_word_embeddings);
  // One norm per block: 8.03B parameters (the hub page: 8.03B).
  EXPECT_EQ(hp.param_counts().norms_per_block, 4096);
  EXPECT_NEAR(static_cast<double>(hp.param_counts().total()), 8.028e9, 0.001e9);
}

// HyperCLOVAX SEED Think 14B (tests/assets/model-configs/README.md: written from the model card,
// sizes reconstructed): Peri-LN post norms, the multipliers' neutral values when null.
TEST(HParams, HyperClovaxSeedThink14B) {
  const HParams hp = load_asset("HyperCLOVAX-SEED-Think-14B");
  EXPECT_EQ(hp.family, ModelFamily::kHyperClovax);
  EXPECT_EQ(family_name(hp.family), "hyperclovax");
  EXPECT_EQ(hp.num_hidden_layers, 38);
  EXPECT_EQ(hp.head_dim, 128);
  EXPECT_TRUE(hp.pre_norms);
  EXPECT_TRUE(hp.post_norms);
  EXPECT_DOUBLE_EQ(hp.query_scale, 1.0 / std::sqrt(128.0));
  EXPECT_DOUBLE_EQ(hp.embedding_scale, 1.0);
  EXPECT_DOUBLE_EQ(hp.residual_multiplier, 1.0);
  EXPECT_DOUBLE_EQ(hp.logit_scale, 1.0);
  // Four norms per block (input, post_attention, post_norm1, post_norm2): the card's 14.74B.
  EXPECT_EQ(hp.param_counts().norms_per_block, 4 * 6144);
  EXPECT_NEAR(static_cast<double>(hp.param_counts().total()), 14.74e9, 0.01e9);
}

// HyperCLOVAXConfig: the multipliers as given, Granite's biases, and refusals naming the key.
TEST(HParams, HyperClovaxMultipliersAndRefusals) {
  Json j = tiny_llama();
  j["architectures"] = {"HyperCLOVAXForCausalLM"};
  j["model_type"] = "hyperclovax";
  j["embedding_multiplier"] = 12.0;
  j["attention_multiplier"] = 0.015625;
  j["residual_multiplier"] = 0.22;
  j["logits_scaling"] = 0.125;
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  const HParams hp = parse_ok(j);
  EXPECT_DOUBLE_EQ(hp.embedding_scale, 12.0);
  EXPECT_DOUBLE_EQ(hp.query_scale, 0.015625);
  EXPECT_DOUBLE_EQ(hp.residual_multiplier, 0.22);
  EXPECT_DOUBLE_EQ(hp.logit_scale, 0.125);
  EXPECT_FALSE(hp.post_norms);  // use_post_norm defaults to false
  EXPECT_TRUE(hp.qkv_bias && hp.o_bias && hp.mlp_bias);
  for (const char* key :
       {"embedding_multiplier", "attention_multiplier", "residual_multiplier", "logits_scaling"}) {
    Json bad = j;
    bad[key] = -1.0;
    auto r = parse(bad);
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_NE(r.status().message().find(std::string("'") + key + "'"), std::string::npos)
        << r.status().message();
  }
  Json odd = j;
  odd["num_attention_heads"] = 3;
  odd["num_key_value_heads"] = 1;
  odd["head_dim"] = 16;
  EXPECT_FALSE(parse(odd).ok());  // 64 % 3 != 0 (HyperCLOVAXConfig.validate_architecture)
}

// Cohere2Config: layer_types over sliding_window_pattern, logit_scale's default 0.0625, and the
// head_dim it forces (hidden / heads): a file saying otherwise is refused, naming the key.
TEST(HParams, Cohere2DefaultsAndRefusals) {
  Json j = tiny_llama();
  j["architectures"] = {"Cohere2ForCausalLM"};
  j["model_type"] = "cohere2";
  j.erase("rms_norm_eps");
  j["layer_norm_eps"] = 1e-3;
  j["num_hidden_layers"] = 3;
  j["layer_types"] = {"full_attention", "sliding_attention", "full_attention"};
  auto hp = parse(j);
  ASSERT_TRUE(hp.ok()) << hp.status().to_string();
  EXPECT_DOUBLE_EQ(hp->logit_scale, 0.0625);
  EXPECT_DOUBLE_EQ(hp->rms_norm_eps, 1e-3);
  const std::vector<int64_t> want = {0, 4096, 0};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(hp->layers[i].sliding_window, want[i]) << i;
    EXPECT_EQ(hp->layers[i].use_rope, want[i] > 0) << i;
  }
  j["head_dim"] = 8;  // tiny_llama: hidden 64, 4 heads
  expect_error(j, Code::kInvalidArgument, {"'head_dim'"});
}

TEST(HParams, Exaone4PatternsAndNullWindow) {
  Json j = tiny_llama();
  j["architectures"] = {"Exaone4ForCausalLM"};
  j["num_hidden_layers"] = 5;
  j["sliding_window"] = 16;
  j["sliding_window_pattern"] = "LG";  // the last layer is always global
  auto hp = parse(j);
  ASSERT_TRUE(hp.ok()) << hp.status().to_string();
  const std::vector<int64_t> want = {16, 0, 16, 0, 0};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(hp->layers[i].sliding_window, want[i]) << i;
    EXPECT_EQ(hp->layers[i].use_rope, want[i] > 0) << i;
  }
  j["sliding_window"] = nullptr;  // no window: every layer global and with RoPE
  hp = parse(j);
  ASSERT_TRUE(hp.ok()) << hp.status().to_string();
  for (const auto& l : hp->layers) {
    EXPECT_EQ(l.sliding_window, 0);
    EXPECT_TRUE(l.use_rope);
  }
  j["sliding_window"] = 16;
  j["sliding_window_pattern"] = "LXG";
  expect_error(j, Code::kInvalidArgument, {"'sliding_window_pattern'", "LXG"});
}

TEST(HParamsErrors, SmolLm3NoRopeLayersMustMatchLayers) {
  Json j = tiny_llama();
  j["architectures"] = {"SmolLM3ForCausalLM"};
  j["no_rope_layers"] = {1, 0, 1};
  expect_error(j, Code::kInvalidArgument, {"'no_rope_layers'", "3 entries"});
  j["no_rope_layers"] = {1, 2};
  expect_error(j, Code::kInvalidArgument, {"'no_rope_layers'", "0/1"});
}

TEST(HParamsErrors, MissingRequiredKey) {
  Json j = tiny_llama();
  j.erase("hidden_size");
  expect_error(j, Code::kNotFound, {"'hidden_size'"});
  j = tiny_llama();
  j.erase("architectures");
  expect_error(j, Code::kNotFound, {"'architectures'"});
}

TEST(HParamsErrors, WrongJsonType) {
  Json j = tiny_llama();
  j["num_hidden_layers"] = "2";
  expect_error(j, Code::kInvalidArgument, {"'num_hidden_layers'", "expected an integer"});
  j = tiny_llama();
  j["tie_word_embeddings"] = 1;
  expect_error(j, Code::kInvalidArgument, {"'tie_word_embeddings'", "boolean"});
  j = tiny_llama();
  j["rope_scaling"] = "llama3";
  expect_error(j, Code::kInvalidArgument, {"'rope_scaling'", "object"});
}

TEST(HParamsErrors, NonPositiveSize) {
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "num_key_value_heads"}) {
    Json j = tiny_llama();
    j[key] = key == std::string("hidden_size") ? -64 : 0;
    expect_error(j, Code::kInvalidArgument, {key, "positive"});
  }
}

TEST(HParamsErrors, HeadsMustDivide) {
  Json j = tiny_llama();
  j["num_attention_heads"] = 6;
  j["num_key_value_heads"] = 3;
  expect_error(j, Code::kInvalidArgument, {"'num_attention_heads'", "hidden_size 64"});
  j["head_dim"] = 16;  // an explicit head_dim lifts the constraint
  EXPECT_TRUE(parse(j).ok());
  j["num_key_value_heads"] = 4;
  expect_error(j, Code::kInvalidArgument, {"'num_key_value_heads'", "does not divide"});
}

TEST(HParamsErrors, UnknownRopeScalingType) {
  Json j = tiny_llama();
  j["rope_scaling"] = {{"rope_type", "ntk-by-parts"}, {"factor", 2.0}};
  expect_error(j, Code::kInvalidArgument, {"'rope_scaling.rope_type'", "ntk-by-parts"});
  j["rope_scaling"] = {{"type", "bogus"}, {"factor", 2.0}};
  expect_error(j, Code::kInvalidArgument, {"'rope_scaling.type'", "bogus"});
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  expect_error(j, Code::kNotFound, {"'rope_scaling.low_freq_factor'"});
}

TEST(HParamsErrors, InvalidJsonReportsLineAndColumn) {
  auto hp = parse_hparams("{\n  \"hidden_size\": 64,\n  \"vocab_size\": ]\n}", "bad.json");
  ASSERT_FALSE(hp.ok());
  EXPECT_EQ(hp.status().code(), Code::kInvalidArgument);
  EXPECT_NE(hp.status().message().find("bad.json:3:17"), std::string::npos)
      << hp.status().message();
}

TEST(HParamsErrors, UnsupportedArchitectureListsSupported) {
  for (const char* arch : {"GPT2LMHeadModel", "FalconForCausalLM"}) {
    Json j = tiny_llama();
    j["architectures"] = {arch};
    expect_error(
        j, Code::kUnimplemented,
        {arch, "LlamaForCausalLM", "Qwen3ForCausalLM", "Gemma2ForCausalLM", "Phi3ForCausalLM"});
  }
}

// Mixture-of-experts models users bring: exit 3 naming the architecture, "not yet supported"
// and "planned", by architecture or by model_type.
TEST(HParamsErrors, MoeArchitecturesArePlanned) {
  const std::pair<const char*, const char*> moe[] = {{"Qwen3MoeForCausalLM", "qwen3_moe"},
                                                     {"GptOssForCausalLM", "gpt_oss"},
                                                     {"MixtralForCausalLM", "mixtral"}};
  for (const auto& [arch, type] : moe) {
    Json j = tiny_llama();
    j["architectures"] = {arch};
    j["model_type"] = type;
    j["num_experts"] = 8;
    expect_error(j, Code::kUnimplemented,
                 {"'architectures'", arch, type, "mixture-of-experts", "not yet supported",
                  "planned"});
    j.erase("architectures");
    j["architectures"] = {"SomethingForCausalLM"};  // the model_type alone names it
    expect_error(j, Code::kUnimplemented, {type, "not yet supported", "planned"});
  }
}

TEST(HParamsErrors, UnsupportedOptionNamesKey) {
  Json j = tiny_llama();
  j["num_local_experts"] = 8;
  expect_error(j, Code::kUnimplemented, {"'num_local_experts'"});
  j = tiny_llama();
  j["hidden_act"] = "relu";
  expect_error(j, Code::kUnimplemented, {"'hidden_act'", "relu"});
}

TEST(HParamsErrors, MissingFile) {
  auto hp = load_hparams(qbc::testing::temp_dir() / "nope" / "config.json");
  ASSERT_FALSE(hp.ok());
  EXPECT_EQ(hp.status().code(), Code::kNotFound);
  EXPECT_NE(hp.status().message().find("nope/config.json"), std::string::npos);
}

TEST(HParams, TorchDtypeBits) {
  EXPECT_EQ(*torch_dtype_bits("bfloat16"), 16);
  EXPECT_EQ(*torch_dtype_bits("float32"), 32);
  EXPECT_FALSE(torch_dtype_bits("complex64").ok());
  EXPECT_EQ(ParamCounts::bytes(3, 4), 2);
}

}  // namespace
}  // namespace qbc::frontend
