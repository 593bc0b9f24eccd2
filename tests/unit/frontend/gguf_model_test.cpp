// Tests for ModelSource on GGUF files: the quantized stories260K against its F32 original, and
// GGUFs converted here from random HF models of each supported architecture the way llama.cpp's
// convert_hf_to_gguf.py does it (Llama q/k row permutation, Gemma norm + 1, llama3 rope_freqs),
// which ModelSource must undo exactly.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gguf_convert.h"
#include "qbc/frontend/gguf.h"
#include "qbc/frontend/model_source.h"
#include "qbc/frontend/random_model.h"
#include "test_models.h"
#include "test_support.h"

namespace qbc::frontend {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::convert_to_gguf;
using ::qbc::testing::GgufWriter;
using ::qbc::testing::shrink;
using ::qbc::testing::temp_dir;
using ::qbc::testing::write_file;

// A random HF model from `config_json`, shrunk, in float32.
fs::path random_hf(const std::string& name, const std::string& config_json) {
  RandomModelOptions o;
  o.config_json = config_json;
  o.output_dir = temp_dir() / name;
  o.seed = 11;
  o.overrides = shrink();
  o.init_std = 0.5;  // Large values make a wrong permutation impossible to miss.
  const Status s = write_random_model(o);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return o.output_dir;
}

std::string shared_config(const std::string& name) {
  return ::qbc::testing::read_file(::qbc::testing::shared_dir() / "model-configs" / name /
                                   "config.json");
}

struct ArchCase {
  const char* config;  // under model-configs/
  const char* arch;    // GGUF general.architecture
};

TEST(GgufModelTest, ConvertedRandomModelsMatchHfExactly) {
  QBC_REQUIRE_SHARED(configs, "model-configs");
  for (const ArchCase& c :
       {ArchCase{"Llama-3.2-1B-Instruct", "llama"}, ArchCase{"SmolLM2-135M-Instruct", "llama"},
        ArchCase{"Qwen2.5-0.5B-Instruct", "qwen2"}, ArchCase{"Qwen3-0.6B", "qwen3"},
        ArchCase{"gemma-2-2b-it", "gemma2"}}) {
    SCOPED_TRACE(c.config);
    std::string config = shared_config(c.config);
    // GGUF has no query_pre_attn_scalar: llama.cpp uses head_dim, so match the shrunk head_dim.
    const std::string scalar = "\"query_pre_attn_scalar\": 256";
    if (auto at = config.find(scalar); at != std::string::npos) {
      config.replace(at, scalar.size(), "\"query_pre_attn_scalar\": 16");
    }
    auto hf = ModelSource::open(random_hf(c.config, config));
    QBC_ASSERT_OK(hf);
    const fs::path gguf_path =
        convert_to_gguf(*hf, c.arch, temp_dir() / (std::string(c.config) + ".gguf"));
    auto gguf = ModelSource::open(gguf_path);
    QBC_ASSERT_OK(gguf);
    QBC_ASSERT_OK(gguf->validate());
    EXPECT_TRUE(gguf->unexpected_tensors().empty());

    const HParams& a = hf->hparams();
    const HParams& b = gguf->hparams();
    EXPECT_EQ(a.architecture, b.architecture);
    EXPECT_EQ(a.family, b.family);
    EXPECT_EQ(a.vocab_size, b.vocab_size);
    EXPECT_EQ(a.hidden_size, b.hidden_size);
    EXPECT_EQ(a.intermediate_size, b.intermediate_size);
    EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
    EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
    EXPECT_EQ(a.num_key_value_heads, b.num_key_value_heads);
    EXPECT_EQ(a.head_dim, b.head_dim);
    EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
    EXPECT_EQ(a.rope_theta, b.rope_theta);
    EXPECT_EQ(a.rope_scaling.type, b.rope_scaling.type);
    if (std::string(c.config) == "Llama-3.2-1B-Instruct") {
      // Recovered from rope_freqs.weight, not from metadata keys.
      EXPECT_EQ(b.rope_scaling.type, RopeScalingType::kLlama3);
      EXPECT_EQ(b.rope_scaling.factor, 32.0);
    }
    EXPECT_EQ(a.rope_scaling.factor, b.rope_scaling.factor);
    EXPECT_EQ(a.rope_scaling.low_freq_factor, b.rope_scaling.low_freq_factor);
    EXPECT_EQ(a.rope_scaling.high_freq_factor, b.rope_scaling.high_freq_factor);
    EXPECT_EQ(a.rope_scaling.original_max_position_embeddings,
              b.rope_scaling.original_max_position_embeddings);
    EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
    EXPECT_EQ(a.qkv_bias, b.qkv_bias);
    EXPECT_EQ(a.qk_norm, b.qk_norm);
    EXPECT_EQ(a.post_norms, b.post_norms);
    EXPECT_EQ(a.norm_style, b.norm_style);
    EXPECT_EQ(a.activation, b.activation);
    EXPECT_EQ(a.attn_logit_softcap, b.attn_logit_softcap);
    EXPECT_EQ(a.final_logit_softcap, b.final_logit_softcap);
    EXPECT_EQ(a.query_scale, b.query_scale);
    EXPECT_EQ(a.embedding_scale, b.embedding_scale);
    ASSERT_EQ(a.layers.size(), b.layers.size());
    for (size_t i = 0; i < a.layers.size(); ++i) {
      EXPECT_EQ(a.layers[i].sliding_window, b.layers[i].sliding_window) << "layer " << i;
    }

    ASSERT_EQ(hf->tensors().size(), gguf->tensors().size());
    std::vector<float> x, y;
    for (size_t i = 0; i < hf->tensors().size(); ++i) {
      const TensorInfo& t = hf->tensors()[i];
      ASSERT_EQ(t.name, gguf->tensors()[i].name);
      EXPECT_EQ(t.shape, gguf->tensors()[i].shape) << t.name;
      QBC_ASSERT_OK(hf->read_f32(t.name, &x));
      QBC_ASSERT_OK(gguf->read_f32(t.name, &y));
      ASSERT_EQ(x.size(), y.size());
      // Gemma norms go through (w + 1) - 1 in float32: exact to one ulp of 1 + w.
      const bool gemma_norm = gguf->tensors()[i].transform == TensorTransform::kSubtractOne;
      double max_diff = 0;
      for (size_t k = 0; k < x.size(); ++k)
        max_diff = std::max(max_diff, double(std::fabs(x[k] - y[k])));
      EXPECT_LE(max_diff, gemma_norm ? 4e-7 : 0.0) << t.name;
    }
  }
}

TEST(GgufModelTest, OutputWeightDecidesTying) {
  auto hf = ModelSource::open(random_hf("tied-src", std::string(tiny_llama_config_json())));
  QBC_ASSERT_OK(hf);
  ASSERT_TRUE(hf->has_tensor("lm_head.weight"));
  auto untied = ModelSource::open(convert_to_gguf(*hf, "llama", temp_dir() / "untied.gguf"));
  QBC_ASSERT_OK(untied);
  EXPECT_FALSE(untied->hparams().tie_word_embeddings);
  EXPECT_EQ(untied->find("lm_head.weight")->name_in_file, "output.weight");

  // llama.cpp writes no output.weight for tied models.
  testing::GgufConvertOptions skip_head;
  skip_head.skip = {"lm_head.weight"};
  auto tied = ModelSource::open(
      convert_to_gguf(*hf, "llama", temp_dir() / "tied.gguf", skip_head));
  QBC_ASSERT_OK(tied);
  EXPECT_TRUE(tied->hparams().tie_word_embeddings);
  EXPECT_FALSE(tied->has_tensor("lm_head.weight"));
  QBC_ASSERT_OK(tied->validate());
}

TEST(GgufModelTest, Q8_0StoriesIsCloseToF32) {
  QBC_REQUIRE_SHARED(f32_path, "models/stories260k/stories260K.gguf");
  QBC_REQUIRE_SHARED(q8_path, "models/stories260k/quant/stories260K-Q8_0.gguf");
  auto f32 = ModelSource::open(f32_path);
  QBC_ASSERT_OK(f32);
  auto q8 = ModelSource::open(q8_path);
  QBC_ASSERT_OK(q8);
  QBC_ASSERT_OK(q8->validate());
  EXPECT_EQ(q8->find("model.layers.0.self_attn.q_proj.weight")->dtype, "Q8_0");
  EXPECT_EQ(q8->find("model.layers.0.mlp.down_proj.weight")->dtype, "F16");
  int q8_tensors = 0;
  std::vector<float> a, b;
  for (const TensorInfo& t : q8->tensors()) {
    QBC_ASSERT_OK(f32->read_f32(t.name, &a));
    QBC_ASSERT_OK(q8->read_f32(t.name, &b));
    ASSERT_EQ(a.size(), b.size()) << t.name;
    if (t.dtype != "Q8_0") continue;
    ++q8_tensors;
    // Q8_0 blocks are 32 consecutive elements of a row; the unpermute moves whole rows, so every
    // aligned 32-element run of the HF-order values is one stored block.
    const int64_t cols = t.shape.back();
    ASSERT_EQ(cols % 32, 0) << t.name;
    for (size_t blk = 0; blk < a.size(); blk += 32) {
      double amax = 0;
      for (size_t k = blk; k < blk + 32; ++k) amax = std::max(amax, double(std::fabs(a[k])));
      const double bound = amax / 127 * 0.6 + 1e-7;  // d/2, plus d rounded to fp16
      for (size_t k = blk; k < blk + 32; ++k) {
        ASSERT_LE(std::fabs(a[k] - b[k]), bound) << t.name << " element " << k;
      }
    }
  }
  EXPECT_GE(q8_tensors, 20);
}

TEST(GgufModelTest, ComposedConfigIsHfShaped) {
  QBC_REQUIRE_SHARED(path, "models/stories260k/stories260K.gguf");
  auto src = ModelSource::open(path);
  QBC_ASSERT_OK(src);
  const std::string& cfg = src->config_json_text();
  EXPECT_TRUE(contains(cfg, "\"rms_norm_eps\": 1e-05")) << cfg;
  EXPECT_TRUE(contains(cfg, "\"rope_theta\": 10000.0")) << cfg;
  EXPECT_TRUE(contains(cfg, "\"vocab_size\": 512")) << cfg;
  EXPECT_TRUE(contains(cfg, "\"tie_word_embeddings\": false")) << cfg;
  // The composed text parses on its own to the same hparams.
  auto again = parse_hparams(cfg, "composed");
  QBC_ASSERT_OK(again);
  EXPECT_EQ(again->num_key_value_heads, 4);
}

TEST(GgufModelTest, UnsupportedArchitectureListsSupportedOnes) {
  GgufWriter w;
  w.str("general.architecture", "mamba");
  w.tensor("token_embd.weight", {4, 4}, std::vector<float>(16, 0.f));
  const fs::path path = temp_dir() / "mamba.gguf";
  write_file(path, w.build());
  auto src = ModelSource::open(path);
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.status().code(), Code::kUnimplemented);
  EXPECT_TRUE(contains(src.status().message(), "'mamba'")) << src.status().message();
  EXPECT_TRUE(contains(src.status().message(), "llama, qwen2, qwen3, gemma2"))
      << src.status().message();
  EXPECT_TRUE(contains(src.status().message(), path.string()));
}

// A file that mixes types per tensor, as llama-quantize's "Q4_K_M" does (F32 norms, Q4_K
// embedding and projections, Q5_K/Q6_K attn_v and ffn_down, Q6_K output), loads as one model:
// every tensor reads back as exactly the values its blocks decode to by the published formula
// (computed by the tests' reference quantizer), the q/k rows unpermuted after decoding.
TEST(GgufModelTest, MixedQuantTypesLoadAsOneModel) {
  auto hf = ModelSource::open(testing::random_k_quant_llama(temp_dir() / "mixed-src", 256, 0.1));
  QBC_ASSERT_OK(hf);
  testing::GgufConvertOptions plan;
  plan.type_of = testing::q4_k_m_like_type;
  auto gguf = ModelSource::open(convert_to_gguf(*hf, "llama", temp_dir() / "mixed.gguf", plan));
  QBC_ASSERT_OK(gguf);
  QBC_ASSERT_OK(gguf->validate());
  std::map<std::string, int> types;
  std::vector<float> v, got;
  for (const TensorInfo& t : hf->tensors()) {
    SCOPED_TRACE(t.name);
    const TensorInfo* g = gguf->find(t.name);
    ASSERT_NE(g, nullptr);
    const GgmlType type = testing::q4_k_m_like_type(g->name_in_file);
    ++types[std::string(ggml_type_name(type))];
    std::string dtype(ggml_type_name(type));
    for (char& c : dtype) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_EQ(g->dtype, dtype);  // "Q4_K", "F32": the type travels with the tensor
    QBC_ASSERT_OK(hf->read_f32(t.name, &v));
    QBC_ASSERT_OK(gguf->read_f32(t.name, &got));
    EXPECT_EQ(got, testing::ref_quantize(type, v).values);
    if (type != GgmlType::kF32) {
      EXPECT_NE(got, v);  // really quantized
    }
  }
  const std::map<std::string, int> expected_types = {
      {"f32", 5}, {"q4_K", 11}, {"q5_K", 2}, {"q6_K", 3}};
  EXPECT_EQ(types, expected_types);
}

TEST(GgufModelTest, MissingKeyAndMissingTensorAreNamed) {
  auto hf = ModelSource::open(random_hf("missing-src", std::string(tiny_llama_config_json())));
  QBC_ASSERT_OK(hf);
  testing::GgufConvertOptions skip;
  skip.skip = {"model.layers.1.mlp.down_proj.weight"};
  const fs::path broken = convert_to_gguf(*hf, "llama", temp_dir() / "broken.gguf", skip);
  auto src = ModelSource::open(broken);
  QBC_ASSERT_OK(src);
  const Status s = src->validate();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(
      s.message(), "missing tensor model.layers.1.mlp.down_proj.weight (blk.1.ffn_down.weight)"))
      << s.message();
  EXPECT_TRUE(contains(s.message(), broken.string())) << s.message();

  // A required metadata key missing.
  GgufWriter k;
  k.str("general.architecture", "qwen2");
  k.u32("qwen2.embedding_length", 64);
  const fs::path no_keys = temp_dir() / "nokeys.gguf";
  write_file(no_keys, k.build());
  auto bad = ModelSource::open(no_keys);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kNotFound);
  EXPECT_TRUE(contains(bad.status().message(), "qwen2.attention.head_count"))
      << bad.status().message();
}

}  // namespace
}  // namespace qbc::frontend
