// Tests for ModelSource on GGUF files: the quantized stories260K against its F32 original, and
// GGUFs converted here from random HF models of each supported architecture the way llama.cpp's
// convert_hf_to_gguf.py does it (Llama q/k row permutation, Gemma norm + 1, llama3 rope_freqs),
// which ModelSource must undo exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gguf_bytes.h"
#include "qbc/frontend/gguf.h"
#include "qbc/frontend/model_source.h"
#include "qbc/frontend/random_model.h"
#include "test_models.h"
#include "test_support.h"

namespace qbc::frontend {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::enc;
using ::qbc::testing::enc_array;
using ::qbc::testing::enc_str;
using ::qbc::testing::shrink;
using ::qbc::testing::temp_dir;
using ::qbc::testing::write_file;

// ---- A minimal GGUF v3 writer (F32 tensors only). ----

class GgufWriter {
 public:
  void u32(const std::string& key, uint32_t v) { kv(key, GgufType::kUint32, enc(v)); }
  void f32(const std::string& key, float v) { kv(key, GgufType::kFloat32, enc(v)); }
  void str(const std::string& key, const std::string& v) { kv(key, GgufType::kString, enc_str(v)); }
  void tokens(int64_t n) {
    std::string names;
    for (int64_t i = 0; i < n; ++i) names += enc_str("t" + std::to_string(i));
    kv("tokenizer.ggml.tokens", GgufType::kArray,
       enc_array(GgufType::kString, static_cast<uint64_t>(n), names));
  }
  // `shape` is PyTorch order; GGUF stores it reversed.
  void tensor(const std::string& name, const std::vector<int64_t>& shape,
              const std::vector<float>& values) {
    tensors_.push_back({name, shape, values});
  }
  std::string build() const {
    std::string out =
        "GGUF" + enc<uint32_t>(3) + enc<uint64_t>(tensors_.size()) + enc<uint64_t>(n_kv_) + kvs_;
    std::string data;
    for (const Tensor& t : tensors_) {
      out += enc_str(t.name) + enc<uint32_t>(static_cast<uint32_t>(t.shape.size()));
      for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) out += enc<uint64_t>(*it);
      out += enc<uint32_t>(0) + enc<uint64_t>(data.size());
      data.append(reinterpret_cast<const char*>(t.values.data()), t.values.size() * 4);
      data.append((32 - data.size() % 32) % 32, '\0');
    }
    out.append((32 - out.size() % 32) % 32, '\0');
    return out + data;
  }

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> values;
  };
  void kv(const std::string& key, GgufType type, const std::string& payload) {
    kvs_ += enc_str(key) + enc<uint32_t>(static_cast<uint32_t>(type)) + payload;
    ++n_kv_;
  }
  std::string kvs_;
  uint64_t n_kv_ = 0;
  std::vector<Tensor> tensors_;
};

// HF → llama.cpp names, written out independently of the code under test.
std::string gguf_name(const std::string& hf, const std::string& arch) {
  static const std::map<std::string, std::string> globals = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"}};
  if (auto it = globals.find(hf); it != globals.end()) return it->second;
  std::map<std::string, std::string> block = {{"input_layernorm", "attn_norm"},
                                              {"self_attn.q_proj", "attn_q"},
                                              {"self_attn.k_proj", "attn_k"},
                                              {"self_attn.v_proj", "attn_v"},
                                              {"self_attn.o_proj", "attn_output"},
                                              {"self_attn.q_norm", "attn_q_norm"},
                                              {"self_attn.k_norm", "attn_k_norm"},
                                              {"mlp.gate_proj", "ffn_gate"},
                                              {"mlp.up_proj", "ffn_up"},
                                              {"mlp.down_proj", "ffn_down"},
                                              {"post_attention_layernorm", "ffn_norm"}};
  if (arch == "gemma2") {
    block["post_attention_layernorm"] = "post_attention_norm";
    block["pre_feedforward_layernorm"] = "ffn_norm";
    block["post_feedforward_layernorm"] = "post_ffw_norm";
  }
  // model.layers.N.<sub>.<leaf>
  const size_t n_begin = std::strlen("model.layers.");
  const size_t n_end = hf.find('.', n_begin);
  const size_t leaf = hf.rfind('.');
  const std::string sub = hf.substr(n_end + 1, leaf - n_end - 1);
  return "blk." + hf.substr(n_begin, n_end - n_begin) + "." + block.at(sub) + hf.substr(leaf);
}

// llama.cpp's permute(): reshape(n_head, 2, rows / n_head / 2, cols).swapaxes(1, 2).
std::vector<float> permute(const std::vector<float>& w, int64_t rows, int64_t heads) {
  const int64_t cols = static_cast<int64_t>(w.size()) / rows;
  const int64_t half = rows / heads / 2;
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < half; ++j)
        std::memcpy(&out[((h * half + j) * 2 + i) * cols], &w[((h * 2 + i) * half + j) * cols],
                    cols * sizeof(float));
  return out;
}

// llama.cpp's LlamaModel rope_freqs for rope_scaling llama3.
std::vector<float> llama3_rope_freqs(const RopeScaling& rs, double theta, int64_t dim) {
  std::vector<float> out;
  const double low_wavelen = rs.original_max_position_embeddings / rs.low_freq_factor;
  const double high_wavelen = rs.original_max_position_embeddings / rs.high_freq_factor;
  for (int64_t i = 0; i < dim; i += 2) {
    const double freq = 1.0 / std::pow(theta, static_cast<double>(i) / dim);
    const double wavelen = 2 * M_PI / freq;
    if (wavelen < high_wavelen) {
      out.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      out.push_back(static_cast<float>(rs.factor));
    } else {
      const double smooth = (rs.original_max_position_embeddings / wavelen - rs.low_freq_factor) /
                            (rs.high_freq_factor - rs.low_freq_factor);
      out.push_back(static_cast<float>(1.0 / ((1 - smooth) / rs.factor + smooth)));
    }
  }
  return out;
}

// Converts an HF ModelSource to a GGUF file the way convert_hf_to_gguf.py would.
// Tensors named in `skip` are left out.
fs::path convert_to_gguf(const ModelSource& hf, const std::string& arch, const fs::path& out,
                         const std::set<std::string>& skip = {}) {
  const HParams& hp = hf.hparams();
  GgufWriter w;
  w.str("general.architecture", arch);
  w.u32(arch + ".context_length", static_cast<uint32_t>(hp.max_position_embeddings));
  w.u32(arch + ".embedding_length", static_cast<uint32_t>(hp.hidden_size));
  w.u32(arch + ".block_count", static_cast<uint32_t>(hp.num_hidden_layers));
  w.u32(arch + ".feed_forward_length", static_cast<uint32_t>(hp.intermediate_size));
  w.u32(arch + ".attention.head_count", static_cast<uint32_t>(hp.num_attention_heads));
  w.u32(arch + ".attention.head_count_kv", static_cast<uint32_t>(hp.num_key_value_heads));
  w.u32(arch + ".attention.key_length", static_cast<uint32_t>(hp.head_dim));
  w.u32(arch + ".attention.value_length", static_cast<uint32_t>(hp.head_dim));
  w.f32(arch + ".attention.layer_norm_rms_epsilon", static_cast<float>(hp.rms_norm_eps));
  w.f32(arch + ".rope.freq_base", static_cast<float>(hp.rope_theta));
  if (arch == "gemma2") {
    w.u32(arch + ".attention.sliding_window", static_cast<uint32_t>(hp.layers[0].sliding_window));
    w.f32(arch + ".attn_logit_softcapping", static_cast<float>(hp.attn_logit_softcap));
    w.f32(arch + ".final_logit_softcapping", static_cast<float>(hp.final_logit_softcap));
  }
  w.str("tokenizer.ggml.model", "gpt2");
  w.tokens(hp.vocab_size);
  if (hp.bos_token_id)
    w.u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(*hp.bos_token_id));
  if (!hp.eos_token_ids.empty()) {
    w.u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(hp.eos_token_ids[0]));
  }
  if (arch == "llama" && hp.rope_scaling.type == RopeScalingType::kLlama3) {
    const std::vector<float> freqs = llama3_rope_freqs(hp.rope_scaling, hp.rope_theta, hp.head_dim);
    w.tensor("rope_freqs.weight", {static_cast<int64_t>(freqs.size())}, freqs);
  }
  std::vector<float> v;
  for (const TensorInfo& t : hf.tensors()) {
    if (skip.count(t.name) != 0) continue;
    EXPECT_TRUE(hf.read_f32(t.name, &v).ok()) << t.name;
    if (arch == "llama" && contains(t.name, "self_attn.q_proj")) {
      v = permute(v, t.shape[0], hp.num_attention_heads);
    } else if (arch == "llama" && contains(t.name, "self_attn.k_proj")) {
      v = permute(v, t.shape[0], hp.num_key_value_heads);
    } else if (arch == "gemma2" && t.name.size() > 11 &&
               t.name.compare(t.name.size() - 11, 11, "norm.weight") == 0) {
      for (float& x : v) x += 1.0f;
    }
    w.tensor(gguf_name(t.name, arch), t.shape, v);
  }
  write_file(out, w.build());
  return out;
}

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
  auto tied = ModelSource::open(
      convert_to_gguf(*hf, "llama", temp_dir() / "tied.gguf", {"lm_head.weight"}));
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

TEST(GgufModelTest, MissingKeyAndMissingTensorAreNamed) {
  auto hf = ModelSource::open(random_hf("missing-src", std::string(tiny_llama_config_json())));
  QBC_ASSERT_OK(hf);
  const fs::path broken = convert_to_gguf(*hf, "llama", temp_dir() / "broken.gguf",
                                          {"model.layers.1.mlp.down_proj.weight"});
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
