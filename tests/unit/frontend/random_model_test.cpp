// Tests for the random-weight HF model writer: per-family tensor names/shapes/dtypes (read
// back with the safetensors reader), determinism, config overrides and error cases.
#include "qbc/frontend/random_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "qbc/frontend/safetensors.h"
#include "support/test_support.h"
#include "test_models.h"

namespace qbc::frontend {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;
using ::qbc::testing::shrink;

// The HF names of one block, written out by hand per family (independent of the writer).
std::set<std::string> expected_block(const std::string& family) {
  std::set<std::string> names = {"input_layernorm.weight", "post_attention_layernorm.weight",
                                 "self_attn.o_proj.weight", "mlp.down_proj.weight"};
  if (family == "phi3") {
    names.insert({"self_attn.qkv_proj.weight", "mlp.gate_up_proj.weight"});
    return names;
  }
  names.insert({"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                "mlp.gate_proj.weight", "mlp.up_proj.weight"});
  if (family == "qwen2") {
    names.insert({"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"});
  }
  if (family == "qwen3" || family == "gemma3") {
    names.insert({"self_attn.q_norm.weight", "self_attn.k_norm.weight"});
  }
  if (family == "gemma2" || family == "gemma3") {
    names.insert({"pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight"});
  }
  return names;
}

struct FamilyCase {
  const char* family;
  const char* shared_config;  // under model-configs/, or nullptr for `inline_config`
  const char* inline_config;
  tensorfile::DType dtype;
  bool tied;
};

constexpr const char* kGemma3 = R"({"architectures": ["Gemma3ForCausalLM"],
  "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 26,
  "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 262144,
  "sliding_window": 512, "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 256,
  "torch_dtype": "bfloat16"})";
constexpr const char* kPhi3 = R"({"architectures": ["Phi3ForCausalLM"],
  "hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 32,
  "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32064,
  "tie_word_embeddings": false, "sliding_window": 2047, "torch_dtype": "bfloat16"})";

const FamilyCase kCases[] = {
    {"llama", "Llama-3.2-1B-Instruct", nullptr, tensorfile::DType::kBF16, true},
    {"llama", "SmolLM2-135M-Instruct", nullptr, tensorfile::DType::kF32, true},
    {"mistral", "Mistral-7B-Instruct-v0.3", nullptr, tensorfile::DType::kF16, false},
    {"qwen2", "Qwen2.5-0.5B-Instruct", nullptr, tensorfile::DType::kF32, true},
    {"qwen3", "Qwen3-0.6B", nullptr, tensorfile::DType::kBF16, true},
    {"gemma2", "gemma-2-2b-it", nullptr, tensorfile::DType::kF32, true},
    {"gemma3", nullptr, kGemma3, tensorfile::DType::kBF16, true},
    {"phi3", nullptr, kPhi3, tensorfile::DType::kF16, false},
};

class RandomModelFamilies : public ::testing::TestWithParam<FamilyCase> {};

TEST_P(RandomModelFamilies, WritesEveryHfTensor) {
  const FamilyCase& c = GetParam();
  RandomModelOptions o;
  if (c.shared_config != nullptr) {
    QBC_REQUIRE_SHARED(path, fs::path("model-configs") / c.shared_config / "config.json");
    o.config_path = path;
  } else {
    o.config_json = c.inline_config;
  }
  o.output_dir = qbc::testing::temp_dir() / c.family;
  o.dtype = c.dtype;
  o.seed = 7;
  o.overrides = shrink(3);
  QBC_ASSERT_OK(write_random_model(o));

  auto hp = load_hparams(o.output_dir / "config.json");
  QBC_ASSERT_OK(hp);
  EXPECT_EQ(family_name(hp->family), c.family);
  EXPECT_EQ(hp->num_hidden_layers, 3);
  EXPECT_EQ(hp->hidden_size, 64);
  EXPECT_EQ(hp->torch_dtype, c.dtype == tensorfile::DType::kF32   ? "float32"
                             : c.dtype == tensorfile::DType::kF16 ? "float16"
                                                                  : "bfloat16");

  auto file = SafetensorsFile::open(o.output_dir / "model.safetensors");
  QBC_ASSERT_OK(file);
  EXPECT_EQ(file->header_size() % 8, 0u);
  EXPECT_EQ(file->metadata().at("format"), "pt");
  std::set<std::string> expected = {"model.embed_tokens.weight", "model.norm.weight"};
  if (!c.tied) expected.insert("lm_head.weight");
  for (int i = 0; i < 3; ++i) {
    for (const std::string& n : expected_block(c.family)) {
      expected.insert("model.layers." + std::to_string(i) + "." + n);
    }
  }
  std::set<std::string> actual;
  int64_t total = 0;
  for (const SafetensorsTensor& t : file->tensors()) {
    actual.insert(t.name);
    EXPECT_EQ(t.dtype, c.dtype) << t.name;
    total += t.num_elements();
  }
  EXPECT_EQ(actual, expected);
  EXPECT_EQ(total, hp->param_counts().total());

  // Shapes follow HF's nn.Linear(in, out) → weight [out, in].
  const auto shape = [&](const std::string& name) {
    const SafetensorsTensor* t = file->find(name);
    return t ? t->shape : std::vector<int64_t>{-1};
  };
  using Shape = std::vector<int64_t>;
  EXPECT_EQ(shape("model.embed_tokens.weight"), (Shape{256, 64}));
  EXPECT_EQ(shape("model.layers.2.self_attn.o_proj.weight"), (Shape{64, 64}));
  EXPECT_EQ(shape("model.layers.1.mlp.down_proj.weight"), (Shape{64, 96}));
  if (std::string(c.family) == "phi3") {
    EXPECT_EQ(shape("model.layers.0.self_attn.qkv_proj.weight"), (Shape{64 + 2 * 32, 64}));
    EXPECT_EQ(shape("model.layers.0.mlp.gate_up_proj.weight"), (Shape{2 * 96, 64}));
  } else {
    EXPECT_EQ(shape("model.layers.0.self_attn.k_proj.weight"), (Shape{32, 64}));
    EXPECT_EQ(shape("model.layers.0.mlp.gate_proj.weight"), (Shape{96, 64}));
  }
  if (std::string(c.family) == "qwen2") {
    EXPECT_EQ(shape("model.layers.0.self_attn.v_proj.bias"), (Shape{32}));
  }
  if (hp->qk_norm) {
    EXPECT_EQ(shape("model.layers.0.self_attn.q_norm.weight"), (Shape{16}));
  }
}

INSTANTIATE_TEST_SUITE_P(Families, RandomModelFamilies, ::testing::ValuesIn(kCases),
                         [](const auto& info) {
                           return std::string(info.param.family) + "_" + std::to_string(info.index);
                         });

// SmolLM3 (Llama names), EXAONE 3.5 (GPT-2-style names of its remote modeling code) and
// EXAONE 4.0 (no pre-norms; post-attention/post-feedforward norms and q/k norms): the names
// written out by hand from the HF code, and the element counts equal param_counts().
TEST(RandomModel, NewFamiliesWriteTheirHfNames) {
  struct Case {
    const char* name;
    const char* config;
    std::set<std::string> model, block;
    std::string layer_prefix;
  };
  const Case cases[] = {
      {"smollm3",
       R"({"architectures": ["SmolLM3ForCausalLM"], "hidden_size": 64,
           "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 256})",
       {"model.embed_tokens.weight", "model.norm.weight"},
       {"input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.q_proj.weight",
        "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
        "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"},
       "model.layers."},
      {"exaone",
       R"({"architectures": ["ExaoneForCausalLM"], "hidden_size": 64, "num_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
           "tie_word_embeddings": false})",
       {"transformer.wte.weight", "transformer.ln_f.weight", "lm_head.weight"},
       {"ln_1.weight", "ln_2.weight", "attn.attention.q_proj.weight",
        "attn.attention.k_proj.weight", "attn.attention.v_proj.weight",
        "attn.attention.out_proj.weight", "mlp.c_fc_0.weight", "mlp.c_fc_1.weight",
        "mlp.c_proj.weight"},
       "transformer.h."},
      {"exaone4",
       R"({"architectures": ["Exaone4ForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 16, "vocab_size": 256, "tie_word_embeddings": true})",
       {"model.embed_tokens.weight", "model.norm.weight"},
       {"post_attention_layernorm.weight", "post_feedforward_layernorm.weight",
        "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
        "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
        "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"},
       "model.layers."},
      // modeling_cohere2.py: one input_layernorm (a LayerNorm without bias) for the parallel
      // attention and MLP, tied embeddings.
      {"cohere2",
       R"({"architectures": ["Cohere2ForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "vocab_size": 256})",
       {"model.embed_tokens.weight", "model.norm.weight"},
       {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
        "self_attn.v_proj.weight", "self_attn.o_proj.weight", "mlp.gate_proj.weight",
        "mlp.up_proj.weight", "mlp.down_proj.weight"},
       "model.layers."},
      // modeling_hyperclovax.py: Llama's names plus the Peri-LN output norms post_norm1 /
      // post_norm2 when use_post_norm.
      {"hyperclovax",
       R"({"architectures": ["HyperCLOVAXForCausalLM"], "hidden_size": 64,
           "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 256, "use_post_norm": true,
           "tie_word_embeddings": false})",
       {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"},
       {"input_layernorm.weight", "post_attention_layernorm.weight", "post_norm1.weight",
        "post_norm2.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
        "self_attn.v_proj.weight", "self_attn.o_proj.weight", "mlp.gate_proj.weight",
        "mlp.up_proj.weight", "mlp.down_proj.weight"},
       "model.layers."},
  };
  for (const Case& c : cases) {
    RandomModelOptions o;
    o.config_json = c.config;
    o.output_dir = qbc::testing::temp_dir() / c.name;
    QBC_ASSERT_OK(write_random_model(o));
    auto hp = load_hparams(o.output_dir / "config.json");
    QBC_ASSERT_OK(hp);
    auto file = SafetensorsFile::open(o.output_dir / "model.safetensors");
    QBC_ASSERT_OK(file);
    std::set<std::string> expected = c.model;
    for (int i = 0; i < 2; ++i) {
      for (const std::string& n : c.block)
        expected.insert(c.layer_prefix + std::to_string(i) + "." + n);
    }
    std::set<std::string> actual;
    int64_t total = 0;
    for (const SafetensorsTensor& t : file->tensors()) {
      actual.insert(t.name);
      total += t.num_elements();
    }
    EXPECT_EQ(actual, expected) << c.name;
    EXPECT_EQ(total, hp->param_counts().total()) << c.name;
    // EXAONE 3.5's intermediate_size defaults to 4 x hidden_size.
    if (std::string(c.name) == "exaone") EXPECT_EQ(hp->intermediate_size, 256);
  }
}

std::string write_tiny(uint64_t seed, tensorfile::DType dtype, const std::string& tag) {
  RandomModelOptions o;
  o.output_dir = qbc::testing::temp_dir() / tag;
  o.seed = seed;
  o.dtype = dtype;
  Status s = write_random_model(o);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return qbc::testing::read_file(o.output_dir / "model.safetensors");
}

TEST(RandomModel, SameSeedIsByteIdentical) {
  for (tensorfile::DType dtype :
       {tensorfile::DType::kF32, tensorfile::DType::kF16, tensorfile::DType::kBF16}) {
    const std::string a = write_tiny(42, dtype, "a");
    const std::string b = write_tiny(42, dtype, "b");
    const std::string c = write_tiny(43, dtype, "c");
    ASSERT_FALSE(a.empty());
    EXPECT_EQ(a, b);
    ASSERT_EQ(a.size(), c.size());
    EXPECT_NE(a, c);
  }
}

TEST(RandomModel, BuiltInTinyLlamaStatistics) {
  RandomModelOptions o;
  o.output_dir = qbc::testing::temp_dir() / "tiny";
  QBC_ASSERT_OK(write_random_model(o));
  auto hp = load_hparams(o.output_dir / "config.json");
  QBC_ASSERT_OK(hp);
  EXPECT_EQ(hp->num_hidden_layers, 2);
  EXPECT_EQ(hp->hidden_size, 64);
  EXPECT_EQ(hp->num_attention_heads, 4);
  EXPECT_EQ(hp->num_key_value_heads, 2);
  EXPECT_EQ(hp->vocab_size, 256);
  auto ckpt = SafetensorsCheckpoint::open(o.output_dir);
  QBC_ASSERT_OK(ckpt);
  EXPECT_NE(ckpt->find("lm_head.weight"), nullptr);
  std::vector<float> v;
  QBC_ASSERT_OK(ckpt->read_f32("model.embed_tokens.weight", &v));
  double sum = 0, sq = 0;
  for (float x : v) {
    sum += x;
    sq += double(x) * x;
  }
  const double mean = sum / v.size(), std = std::sqrt(sq / v.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.002);
  EXPECT_NEAR(std, 0.02, 0.002);
  QBC_ASSERT_OK(ckpt->read_f32("model.layers.1.input_layernorm.weight", &v));
  for (float x : v) EXPECT_NEAR(x, 1.0f, 0.1f);
}

TEST(RandomModel, GemmaNormsAreNearZero) {
  RandomModelOptions o;
  o.config_json = kGemma3;
  o.overrides = shrink();
  o.output_dir = qbc::testing::temp_dir() / "gemma3";
  QBC_ASSERT_OK(write_random_model(o));
  auto ckpt = SafetensorsCheckpoint::open(o.output_dir);
  QBC_ASSERT_OK(ckpt);
  std::vector<float> v;
  QBC_ASSERT_OK(ckpt->read_f32("model.norm.weight", &v));
  for (float x : v) EXPECT_NEAR(x, 0.0f, 0.1f);
}

TEST(RandomModel, OverridesKeepKeyOrderAndFixLayerTypes) {
  const std::string src = R"({"architectures": ["Qwen3ForCausalLM"], "zeta": 1,
    "hidden_size": 1024, "num_hidden_layers": 4, "dtype": "bfloat16",
    "layer_types": ["full_attention", "sliding_attention", "full_attention", "full_attention"]})";
  ConfigOverrides ov;
  ov.num_hidden_layers = 6;
  ov.hidden_size = 64;
  auto out = apply_config_overrides(src, "src.json", ov, tensorfile::DType::kF16);
  QBC_ASSERT_OK(out);
  const auto j = nlohmann::ordered_json::parse(*out);
  EXPECT_EQ(j.begin().key(), "architectures");
  EXPECT_EQ(std::next(j.begin()).key(), "zeta");
  EXPECT_EQ(j["hidden_size"], 64);
  EXPECT_EQ(j["dtype"], "float16");
  EXPECT_EQ(j["torch_dtype"], "float16");
  ASSERT_EQ(j["layer_types"].size(), 6u);
  EXPECT_EQ(j["layer_types"][5], "sliding_attention");
}

TEST(RandomModel, Errors) {
  RandomModelOptions o;
  o.output_dir = qbc::testing::temp_dir() / "err";
  o.dtype = tensorfile::DType::kI8;
  EXPECT_EQ(write_random_model(o).code(), Code::kUnimplemented);

  o.dtype = tensorfile::DType::kF32;
  o.config_json = R"({"architectures": ["Gemma3ForConditionalGeneration"],
                      "text_config": {"hidden_size": 64}})";
  EXPECT_EQ(write_random_model(o).code(), Code::kUnimplemented);

  o.config_json = std::string(tiny_llama_config_json());
  o.overrides.num_attention_heads = 3;  // 2 kv heads do not divide 3 heads
  Status s = write_random_model(o);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("num_key_value_heads"), std::string::npos) << s.message();

  o.config_json.clear();
  o.config_path = qbc::testing::temp_dir() / "missing.json";
  EXPECT_EQ(write_random_model(o).code(), Code::kNotFound);
}

TEST(RandomModel, SpecsMatchParamCountsForSharedConfigs) {
  QBC_REQUIRE_SHARED(dir, "model-configs");
  for (const auto& entry : fs::directory_iterator(dir)) {
    auto hp = load_hparams(entry.path() / "config.json");
    QBC_ASSERT_OK(hp);
    int64_t total = 0;
    for (const HfTensorSpec& s : hf_tensor_specs(*hp)) total += s.num_elements();
    EXPECT_EQ(total, hp->param_counts().total()) << entry.path();
  }
}

// hf_tensor_specs() against checkpoints written by HF transformers itself.
TEST(RandomModel, SpecsMatchRealHfCheckpoints) {
  for (const char* rel :
       {"models/tiny/qwen2/hf", "models/tiny/qwen2-bf16/hf", "models/tiny/qwen3/hf",
        "models/stories260k/hf", "models/stories260k/hf-tied"}) {
    QBC_REQUIRE_SHARED(dir, rel);
    auto hp = load_hparams(dir / "config.json");
    QBC_ASSERT_OK(hp);
    auto file = SafetensorsFile::open(dir / "model.safetensors");
    QBC_ASSERT_OK(file);
    const std::vector<HfTensorSpec> specs = hf_tensor_specs(*hp);
    ASSERT_EQ(specs.size(), file->tensors().size()) << rel;
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_EQ(specs[i].name, file->tensors()[i].name) << rel;
      EXPECT_EQ(specs[i].shape, file->tensors()[i].shape) << rel << " " << specs[i].name;
    }
  }
}

}  // namespace
}  // namespace qbc::frontend
