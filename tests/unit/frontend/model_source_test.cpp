// Tests for ModelSource on HF folders: the stories260K real checkpoints (HF vs GGUF, bit-exact),
// the tiny HF-written Qwen checkpoints, random models of every family, corrupted checkpoints and
// bad paths.
#include "qbc/frontend/model_source.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "qbc/frontend/random_model.h"
#include "qbc/frontend/safetensors.h"
#include "qbc/support/hash.h"
#include "qbc/tensorfile/safetensors_writer.h"
#include "test_models.h"
#include "test_support.h"

namespace qbc::frontend {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::shrink;
using ::qbc::testing::temp_dir;
using ::qbc::testing::write_file;

void expect_same_hparams(const HParams& a, const HParams& b, const std::string& what) {
  EXPECT_EQ(a.architecture, b.architecture) << what;
  EXPECT_EQ(a.vocab_size, b.vocab_size) << what;
  EXPECT_EQ(a.hidden_size, b.hidden_size) << what;
  EXPECT_EQ(a.intermediate_size, b.intermediate_size) << what;
  EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers) << what;
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads) << what;
  EXPECT_EQ(a.num_key_value_heads, b.num_key_value_heads) << what;
  EXPECT_EQ(a.head_dim, b.head_dim) << what;
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps) << what;
  EXPECT_EQ(a.rope_theta, b.rope_theta) << what;
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings) << what;
}

// ---- stories260K: HF folder, tied HF folder and the original GGUF. ----

TEST(ModelSourceTest, Stories260kHfAndGgufAgreeBitExactly) {
  QBC_REQUIRE_SHARED(hf_dir, "models/stories260k/hf");
  QBC_REQUIRE_SHARED(tied_dir, "models/stories260k/hf-tied");
  QBC_REQUIRE_SHARED(gguf_path, "models/stories260k/stories260K.gguf");
  auto hf = ModelSource::open(hf_dir);
  QBC_ASSERT_OK(hf);
  auto tied = ModelSource::open(tied_dir);
  QBC_ASSERT_OK(tied);
  auto gguf = ModelSource::open(gguf_path);
  QBC_ASSERT_OK(gguf);

  EXPECT_EQ(hf->format(), "hf-safetensors");
  EXPECT_EQ(gguf->format(), "gguf");
  expect_same_hparams(hf->hparams(), gguf->hparams(), "hf vs gguf");
  expect_same_hparams(hf->hparams(), tied->hparams(), "hf vs hf-tied");
  EXPECT_EQ(gguf->hparams().rms_norm_eps, 1e-5);  // Stored as float32 9.9999997e-06.
  EXPECT_EQ(gguf->hparams().bos_token_id, hf->hparams().bos_token_id);
  EXPECT_EQ(gguf->hparams().eos_token_ids, hf->hparams().eos_token_ids);
  EXPECT_FALSE(gguf->hparams().tie_word_embeddings);  // The GGUF has output.weight.

  QBC_ASSERT_OK(hf->validate());
  QBC_ASSERT_OK(tied->validate());
  QBC_ASSERT_OK(gguf->validate());
  EXPECT_TRUE(hf->unexpected_tensors().empty());
  EXPECT_TRUE(gguf->unexpected_tensors().empty());

  ASSERT_EQ(hf->tensors().size(), gguf->tensors().size());
  std::vector<float> a, b;
  for (size_t i = 0; i < hf->tensors().size(); ++i) {
    const TensorInfo& h = hf->tensors()[i];
    const TensorInfo& g = gguf->tensors()[i];
    ASSERT_EQ(h.name, g.name);
    EXPECT_EQ(h.shape, g.shape) << h.name;
    EXPECT_EQ(g.dtype, "F32") << g.name;
    QBC_ASSERT_OK(hf->read_f32(h.name, &a));
    QBC_ASSERT_OK(gguf->read_f32(g.name, &b));
    ASSERT_EQ(a.size(), b.size()) << h.name;
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
        << h.name << " differs (" << g.name_in_file << ", " << transform_name(g.transform) << ")";
  }

  // The unpermute is really doing something: q_proj rows are stored permuted in the GGUF.
  const TensorInfo* q = gguf->find("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->name_in_file, "blk.0.attn_q.weight");
  EXPECT_EQ(q->transform, TensorTransform::kUnpermuteRopeRows);
  EXPECT_EQ(q->rope_heads, 8);
  EXPECT_EQ(gguf->find("model.layers.0.self_attn.k_proj.weight")->rope_heads, 4);
  auto q_view = gguf->f32_view("model.layers.0.self_attn.q_proj.weight");
  ASSERT_FALSE(q_view.ok());
  EXPECT_EQ(q_view.status().code(), Code::kFailedPrecondition);

  // Zero-copy views equal read_f32 where no transform applies.
  for (const ModelSource* src : {&*hf, &*gguf}) {
    auto view = src->f32_view("model.layers.2.mlp.down_proj.weight");
    QBC_ASSERT_OK(view);
    QBC_ASSERT_OK(src->read_f32("model.layers.2.mlp.down_proj.weight", &a));
    EXPECT_EQ(std::memcmp(*view, a.data(), a.size() * sizeof(float)), 0);
  }

  // Tied: no lm_head, and tie_word_embeddings is set.
  EXPECT_TRUE(tied->hparams().tie_word_embeddings);
  EXPECT_FALSE(tied->has_tensor("lm_head.weight"));
  EXPECT_TRUE(hf->has_tensor("lm_head.weight"));
  EXPECT_EQ(tied->tensors().size() + 1, hf->tensors().size());

  EXPECT_EQ(hf->tokenizer_path(), hf_dir / "tokenizer.json");
  EXPECT_EQ(gguf->tokenizer_path(), gguf_path);
  EXPECT_TRUE(contains(gguf->config_json_text(), "LlamaForCausalLM"));
  EXPECT_TRUE(contains(hf->config_json_text(), "\"tie_word_embeddings\": false"));
}

TEST(ModelSourceTest, FilesCarrySizesAndHashes) {
  QBC_REQUIRE_SHARED(hf_dir, "models/stories260k/hf");
  QBC_REQUIRE_SHARED(gguf_path, "models/stories260k/stories260K.gguf");
  auto hf = ModelSource::open(hf_dir);
  QBC_ASSERT_OK(hf);
  auto files = hf->files();
  QBC_ASSERT_OK(files);
  ASSERT_EQ(files->size(), 3u);  // config.json, model.safetensors, tokenizer.json
  EXPECT_EQ((*files)[0].path, hf_dir / "config.json");
  EXPECT_EQ((*files)[1].path, hf_dir / "model.safetensors");
  EXPECT_EQ((*files)[2].path, hf_dir / "tokenizer.json");
  for (const SourceFileInfo& f : *files) {
    EXPECT_TRUE(f.path.is_absolute());
    EXPECT_EQ(f.size_bytes, fs::file_size(f.path));
    EXPECT_EQ(f.xxh3_128.size(), 32u);
    const std::string bytes = ::qbc::testing::read_file(f.path);
    EXPECT_EQ(f.xxh3_128, xxh3_128_bytes(bytes.data(), bytes.size())) << f.path;
  }

  auto gguf = ModelSource::open(gguf_path);
  QBC_ASSERT_OK(gguf);
  auto gfiles = gguf->files();
  QBC_ASSERT_OK(gfiles);
  ASSERT_EQ(gfiles->size(), 1u);
  EXPECT_EQ((*gfiles)[0].size_bytes, 1185376u);
}

// ---- Checkpoints written by HF transformers. ----

TEST(ModelSourceTest, TinyHfCheckpointsValidate) {
  for (const char* rel :
       {"models/tiny/qwen2/hf", "models/tiny/qwen2-bf16/hf", "models/tiny/qwen3/hf"}) {
    QBC_REQUIRE_SHARED(dir, rel);
    auto src = ModelSource::open(dir);
    QBC_ASSERT_OK(src);
    QBC_ASSERT_OK(src->validate());
    EXPECT_TRUE(src->unexpected_tensors().empty()) << rel;
    std::vector<float> v;
    QBC_ASSERT_OK(src->read_f32("model.layers.1.self_attn.k_proj.weight", &v));
    EXPECT_EQ(static_cast<int64_t>(v.size()),
              src->find("model.layers.1.self_attn.k_proj.weight")->num_elements());
    if (std::string(rel).find("bf16") != std::string::npos) {
      EXPECT_EQ(src->find("model.embed_tokens.weight")->dtype, "BF16");
      EXPECT_FALSE(src->f32_view("model.embed_tokens.weight").ok());
    }
  }
}

// ---- Random models of every family. ----

fs::path write_random(const std::string& config_name,
                      tensorfile::DType dtype = tensorfile::DType::kF32) {
  RandomModelOptions o;
  if (!config_name.empty()) {
    o.config_path = ::qbc::testing::shared_dir() / "model-configs" / config_name / "config.json";
  }
  o.output_dir = temp_dir() / (config_name.empty() ? "tiny-llama" : config_name);
  o.dtype = dtype;
  o.seed = 7;
  o.overrides = shrink();
  const Status s = write_random_model(o);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return o.output_dir;
}

TEST(ModelSourceTest, RandomModelsOfEveryFamilyValidate) {
  QBC_REQUIRE_SHARED(configs, "model-configs");
  for (const char* name :
       {"Llama-3.2-1B-Instruct", "Mistral-7B-Instruct-v0.3", "Qwen2.5-0.5B-Instruct", "Qwen3-0.6B",
        "gemma-2-2b-it", "SmolLM2-135M-Instruct"}) {
    const fs::path dir = write_random(name, tensorfile::DType::kBF16);
    auto src = ModelSource::open(dir);
    QBC_ASSERT_OK(src);
    QBC_ASSERT_OK(src->validate());
    EXPECT_TRUE(src->unexpected_tensors().empty()) << name;
    EXPECT_EQ(src->tensors().size(), hf_tensor_specs(src->hparams()).size()) << name;
    EXPECT_EQ(src->find("model.norm.weight")->dtype, "BF16");
  }
}

// Rewrites `dir`/model.safetensors through `edit`, which may drop or change tensors.
template <typename Edit>
void rewrite_checkpoint(const fs::path& dir, Edit edit) {
  std::vector<tensorfile::TensorToWrite> out;
  {
    auto file = SafetensorsFile::open(dir / "model.safetensors");
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    for (const SafetensorsTensor& t : file->tensors()) {
      tensorfile::TensorToWrite w;
      w.name = t.name;
      w.dtype = t.dtype;
      w.shape = t.shape;
      w.data.assign(t.data.data, t.data.data + t.data.size);
      if (edit(w)) out.push_back(std::move(w));
    }
  }
  const Status s = tensorfile::write_safetensors(dir / "model.safetensors", out);
  ASSERT_TRUE(s.ok()) << s.to_string();
}

TEST(ModelSourceTest, MissingTensorIsNamedWithItsFile) {
  const fs::path dir = write_random("");
  rewrite_checkpoint(dir, [](const tensorfile::TensorToWrite& t) {
    return t.name != "model.layers.1.mlp.down_proj.weight";
  });
  auto src = ModelSource::open(dir);
  QBC_ASSERT_OK(src);
  const Status s = src->validate();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "missing tensor model.layers.1.mlp.down_proj.weight"))
      << s.message();
  EXPECT_TRUE(contains(s.message(), (dir / "model.safetensors").string())) << s.message();
}

TEST(ModelSourceTest, TransposedTensorIsNamedWithShapes) {
  const fs::path dir = write_random("");
  rewrite_checkpoint(dir, [](tensorfile::TensorToWrite& t) {
    if (t.name == "model.layers.1.mlp.down_proj.weight") std::swap(t.shape[0], t.shape[1]);
    return true;
  });
  auto src = ModelSource::open(dir);
  QBC_ASSERT_OK(src);
  const Status s = src->validate();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  // Shrunk tiny Llama: hidden 64, intermediate 96; down_proj is [hidden, intermediate].
  EXPECT_TRUE(contains(s.message(), "model.layers.1.mlp.down_proj.weight")) << s.message();
  EXPECT_TRUE(contains(s.message(), "has shape [96, 64], expected [64, 96]")) << s.message();
  EXPECT_TRUE(contains(s.message(), (dir / "model.safetensors").string())) << s.message();
}

TEST(ModelSourceTest, ExtraTensorsAreWarningsNotErrors) {
  const fs::path dir = write_random("");
  rewrite_checkpoint(dir, [](tensorfile::TensorToWrite& t) {
    if (t.name == "model.norm.weight") t.name = "model.rotary_emb.inv_freq";
    return true;
  });
  // Renaming drops model.norm.weight: validate fails, and the stray name is listed.
  auto src = ModelSource::open(dir);
  QBC_ASSERT_OK(src);
  EXPECT_FALSE(src->validate().ok());
  EXPECT_EQ(src->unexpected_tensors(), std::vector<std::string>{"model.rotary_emb.inv_freq"});
}

TEST(ModelSourceTest, ShardedCheckpointThroughIndex) {
  const fs::path dir = write_random("");
  std::vector<tensorfile::TensorToWrite> first, second;
  {
    auto file = SafetensorsFile::open(dir / "model.safetensors");
    QBC_ASSERT_OK(file);
    for (const SafetensorsTensor& t : file->tensors()) {
      tensorfile::TensorToWrite w{
          t.name, t.dtype, t.shape, {t.data.data, t.data.data + t.data.size}};
      (t.name < "model.layers.1" ? first : second).push_back(std::move(w));
    }
  }
  std::string weight_map;
  for (const auto* shard : {&first, &second}) {
    const std::string file =
        shard == &first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
    QBC_ASSERT_OK(tensorfile::write_safetensors(dir / file, *shard));
    for (const tensorfile::TensorToWrite& t : *shard) {
      weight_map += (weight_map.empty() ? "" : ",") + ("\"" + t.name + "\": \"" + file + "\"");
    }
  }
  fs::remove(dir / "model.safetensors");
  fs::remove(dir / "tokenizer.json");  // random-model writes one; this folder has none
  write_file(dir / "model.safetensors.index.json",
             "{\"metadata\": {}, \"weight_map\": {" + weight_map + "}}");
  auto src = ModelSource::open(dir);
  QBC_ASSERT_OK(src);
  QBC_ASSERT_OK(src->validate());
  EXPECT_EQ(src->find("model.layers.1.mlp.up_proj.weight")->file,
            dir / "model-00002-of-00002.safetensors");
  auto files = src->files();
  QBC_ASSERT_OK(files);
  ASSERT_EQ(files->size(), 4u);  // config, index, two shards (no tokenizer.json)
  EXPECT_EQ((*files)[1].path, dir / "model.safetensors.index.json");
  EXPECT_TRUE(src->tokenizer_path().empty());

  // A missing tensor is reported against the index.
  fs::remove(dir / "model-00002-of-00002.safetensors");
  auto broken = ModelSource::open(dir);
  ASSERT_FALSE(broken.ok());
  EXPECT_TRUE(contains(broken.status().message(), "model-00002-of-00002.safetensors"))
      << broken.status().message();
}

// ---- Paths that are not models. ----

TEST(ModelSourceTest, RejectsWhatIsNotAModel) {
  const fs::path dir = temp_dir();
  auto missing = ModelSource::open(dir / "nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_TRUE(contains(missing.status().message(), (dir / "nope").string()));

  auto empty_dir = ModelSource::open(dir);
  ASSERT_FALSE(empty_dir.ok());
  EXPECT_EQ(empty_dir.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(empty_dir.status().message(), "config.json"));
  EXPECT_TRUE(contains(empty_dir.status().message(), ".gguf"));

  write_file(dir / "notes.txt", "hello");
  auto text = ModelSource::open(dir / "notes.txt");
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(text.status().message(), (dir / "notes.txt").string()));
  EXPECT_TRUE(contains(text.status().message(), "expected"));

  // config.json but no weights.
  write_file(dir / "config.json", std::string(tiny_llama_config_json()));
  auto no_weights = ModelSource::open(dir);
  ASSERT_FALSE(no_weights.ok());
  EXPECT_EQ(no_weights.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(no_weights.status().message(), "model.safetensors"))
      << no_weights.status().message();

  // A path to config.json opens its folder.
  const fs::path model = write_random("");
  auto via_config = ModelSource::open(model / "config.json");
  QBC_ASSERT_OK(via_config);
  EXPECT_EQ(via_config->path(), model);
}

TEST(ModelSourceTest, ReadErrorsNameTheTensor) {
  const fs::path dir = write_random("");
  auto src = ModelSource::open(dir);
  QBC_ASSERT_OK(src);
  std::vector<float> v;
  const Status s = src->read_f32("model.layers.9.mlp.up_proj.weight", &v);
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_TRUE(contains(s.message(), "model.layers.9.mlp.up_proj.weight"));
  EXPECT_EQ(src->f32_view("nope").status().code(), Code::kNotFound);
}

TEST(ModelSourceTest, MovedSourceKeepsViewsValid) {
  const fs::path dir = write_random("");
  auto src = ModelSource::open(dir);
  QBC_ASSERT_OK(src);
  auto view = src->f32_view("model.norm.weight");
  QBC_ASSERT_OK(view);
  const float first = (*view)[0];
  ModelSource moved = std::move(src).value();
  auto again = moved.f32_view("model.norm.weight");
  QBC_ASSERT_OK(again);
  EXPECT_EQ(*again, *view);
  EXPECT_EQ((*again)[0], first);
}

// The bf16 view is the stored bits: widened, every value is what read_f32 gives.
TEST(ModelSourceTest, Bf16ViewIsTheStoredBits) {
  QBC_REQUIRE_SHARED(dir, "models/tiny/qwen2-bf16/hf");
  auto src = ModelSource::open(dir);
  QBC_ASSERT_OK(src);
  const char* name = "model.embed_tokens.weight";
  auto view = src->bf16_view(name);
  QBC_ASSERT_OK(view);
  std::vector<float> v;
  QBC_ASSERT_OK(src->read_f32(name, &v));
  ASSERT_EQ(static_cast<int64_t>(v.size()), src->find(name)->num_elements());
  size_t differ = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, &v[i], 4);
    differ += (bits & 0xFFFFu) != 0 || (bits >> 16) != (*view)[i];
  }
  EXPECT_EQ(differ, 0u);
  EXPECT_EQ(src->bf16_view("nope").status().code(), Code::kNotFound);
}

TEST(ModelSourceTest, Bf16ViewRefusesOtherDtypes) {
  const fs::path dir = write_random("");  // F32
  auto src = ModelSource::open(dir);
  QBC_ASSERT_OK(src);
  const Status s = src->bf16_view("model.norm.weight").status();
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
  EXPECT_TRUE(contains(s.message(), "model.norm.weight")) << s.to_string();
  EXPECT_TRUE(contains(s.message(), "stored F32")) << s.to_string();
}

}  // namespace
}  // namespace qbc::frontend
