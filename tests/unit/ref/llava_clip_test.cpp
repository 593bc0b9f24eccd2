// LLaVA-1.5: the CLIP vision MBLT graph (frontend::build_clip_vision_graph) run by the float
// reference session against a float64 forward pass written from HF's modeling code
// (naive_llava_clip.h), on a shared photograph preprocessed by image::preprocess with the real
// preprocessor_config.json, over a small random LLaVA checkpoint written from the real config;
// and the language model read as Llama from the real config's sparse text_config.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "naive_llava_clip.h"
#include "qbc/frontend/clip_vision.h"
#include "qbc/frontend/hparams.h"
#include "qbc/frontend/model_source.h"
#include "qbc/frontend/random_model.h"
#include "qbc/frontend/safetensors.h"
#include "qbc/frontend/vision_config.h"
#include "qbc/image/image.h"
#include "qbc/image/preprocess.h"
#include "qbc/ir/verifier.h"
#include "qbc/ref/session.h"
#include "rel_error.h"
#include "small_vlm.h"
#include "test_support.h"
#include "vision_folder_test.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;

using ref::testing::rel_error;

class LlavaClip : public testing::VisionFolderTest {
 protected:
  void SetUp() override {
    QBC_REQUIRE_SHARED(config, "model-configs-new/llava-1.5-7b-hf/config.json");
    QBC_REQUIRE_SHARED(prep, "model-configs-new/llava-1.5-7b-hf/preprocessor_config.json");
    QBC_REQUIRE_SHARED(photo, "data/images/chelsea.png");
    dir_ = testing::temp_dir() / "llava_clip_random";
    frontend::RandomModelOptions o;
    o.config_path = config;
    o.output_dir = dir_;
    o.seed = 11;
    o.init_std = 0.1;  // large enough that attention is far from uniform
    o.overrides.vision.depth = 3;
    o.overrides.vision.hidden_size = 32;
    o.overrides.vision.num_heads = 2;  // head_dim 16
    o.overrides.vision.intermediate_size = 48;
    testing::shrink_language_model(o.overrides);  // the projector writes its width
    QBC_ASSERT_OK(frontend::write_random_model(o));
    open_folder(prep, photo);
  }

  std::vector<double> reference() const {
    ref::testing::NaiveClipDims d;
    d.depth = vc_.depth;
    d.hidden = vc_.width;
    d.heads = vc_.heads;
    d.ffn = vc_.ffn;
    d.text_hidden = vc_.text_hidden;
    d.patch = vc_.patch_size;
    d.image = pixels_.shape[1];
    d.feature_layer = -2;  // the real config's vision_feature_layer
    return ref::testing::naive_llava_image_features(
        d, [this](const std::string& n) { return hf(n); }, pixels_.values);
  }

  // The session's image features, the CLS row dropped as the host does.
  void run_graph(const frontend::VisionConfig& vc, bool f64, std::vector<float>* out) const {
    auto g = frontend::build_clip_vision_graph(vc);
    QBC_ASSERT_OK(g);
    QBC_ASSERT_OK(ir::verify(*g));
    const ir::WeightReader reader = [this](const ir::Weight& w, std::vector<float>* v) {
      return ckpt_->read_f32(w.tensor, v);
    };
    ref::SessionOptions so;
    so.float64 = f64;
    auto session = ref::Session::create(*g, reader, so);
    QBC_ASSERT_OK(session);
    const std::vector<float> rows =
        frontend::clip_patch_rows(pixels_.values, pixels_.shape[1], vc.patch_size);
    auto base = frontend::clip_embed_base(
        vc, [this](const std::string& n, std::vector<float>* v) { return ckpt_->read_f32(n, v); });
    QBC_ASSERT_OK(base);
    std::vector<float> got;
    QBC_ASSERT_OK((*session)->forward_inputs({rows, *base}, &got));
    *out = frontend::clip_drop_cls(vc, got, vc.text_hidden);
  }
};

TEST_F(LlavaClip, ConfigAndPreprocessingGiveThe336Grid) {
  EXPECT_EQ(pixels_.shape, (std::vector<int64_t>{3, 336, 336}));
  EXPECT_EQ(vc_.image_size, 336);
  EXPECT_EQ(vc_.position_embeddings, 577);  // 24 x 24 + CLS
  EXPECT_EQ(vc_.feature_layer, -2);
  EXPECT_FALSE(vc_.keeps_cls);
  EXPECT_EQ(vc_.hidden_act, "quick_gelu");  // CLIPVisionConfig's default
  EXPECT_EQ(vc_.text_hidden, 24);
  auto used = frontend::clip_used_layers(vc_);
  QBC_ASSERT_OK(used);
  EXPECT_EQ(*used, 2);  // hidden_states[-2] of 3 layers
  auto g = frontend::build_clip_vision_graph(vc_);
  QBC_ASSERT_OK(g);
  ASSERT_EQ(g->outputs().size(), 1u);
  EXPECT_EQ(g->node(g->outputs()[0]).type.dims, (std::vector<int64_t>{1, 577, 24}));
}

TEST_F(LlavaClip, FloatSessionMatchesHfFloat64Reference) {
  const std::vector<double> want = reference();
  ASSERT_EQ(want.size(), static_cast<size_t>(576 * vc_.text_hidden));
  double scale = 0.0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  EXPECT_GT(scale, 0.1);
  for (const bool f64 : {false, true}) {
    std::vector<float> got;
    run_graph(vc_, f64, &got);
    ASSERT_EQ(got.size(), want.size());
    const double err = rel_error(got, want);
    std::printf("[llava_clip] %s rel_err %.2e (max|feature| %.3f)\n", f64 ? "f64" : "f32", err,
                scale);
    EXPECT_LE(err, f64 ? 5e-7 : 5e-6) << (f64 ? "float64" : "float32");
  }
}

TEST_F(LlavaClip, WrongLayerOrActivationIsDetected) {
  // The tolerance above cannot pass by accident: the last layer's features, or the erf GELU in
  // place of quick_gelu, differ by far more.
  const std::vector<double> want = reference();
  frontend::VisionConfig last = vc_;
  last.feature_layer = -1;
  frontend::VisionConfig erf = vc_;
  erf.hidden_act = "gelu";
  for (const frontend::VisionConfig& vc : {last, erf}) {
    std::vector<float> got;
    run_graph(vc, false, &got);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_GT(rel_error(got, want), 1e-3) << vc.feature_layer << " " << vc.hidden_act;
  }
}

TEST_F(LlavaClip, FullStrategyKeepsTheClsRow) {
  frontend::VisionConfig full = vc_;
  full.keeps_cls = true;
  std::vector<float> kept, dropped;
  run_graph(full, false, &kept);
  run_graph(vc_, false, &dropped);
  ASSERT_EQ(kept.size(), dropped.size() + static_cast<size_t>(vc_.text_hidden));
  EXPECT_TRUE(std::equal(dropped.begin(), dropped.end(), kept.begin() + vc_.text_hidden));
}

TEST_F(LlavaClip, OtherTowersAndActivationsAreRefused) {
  // LLaVA's tower is CLIP or SigLIP (llava_siglip_test.cpp); a Qwen ViT is not built here.
  frontend::VisionConfig qwen = vc_;
  qwen.tower = frontend::VisionTower::kQwen2Vit;
  auto g = frontend::build_clip_vision_graph(qwen);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), Code::kUnimplemented);
  EXPECT_TRUE(testing::contains(g.status().message(), std::string(frontend::vision_tower_name(
                                                          frontend::VisionTower::kQwen2Vit))))
      << g.status().to_string();
  frontend::VisionConfig relu = vc_;
  relu.hidden_act = "relu";
  g = frontend::build_clip_vision_graph(relu);
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(testing::contains(g.status().message(), "relu")) << g.status().to_string();
}

TEST_F(LlavaClip, RandomCheckpointHoldsEveryTensorUnderLlavaNames) {
  int64_t vision = 0, text = 0;
  std::vector<std::string> names;
  for (const auto& t : ckpt_->tensors()) {
    names.push_back(t.name);
    const bool v =
        t.name.rfind("vision_tower.", 0) == 0 || t.name.rfind("multi_modal_projector.", 0) == 0;
    (v ? vision : text) += t.num_elements();
    if (!v) EXPECT_EQ(t.name.rfind("language_model.", 0), 0u) << t.name;
  }
  EXPECT_EQ(vision, vc_.parameters());
  for (const char* want :
       {"vision_tower.vision_model.embeddings.class_embedding",
        "vision_tower.vision_model.encoder.layers.2.mlp.fc2.bias",
        "vision_tower.vision_model.post_layernorm.weight", "multi_modal_projector.linear_2.weight",
        "language_model.model.embed_tokens.weight", "language_model.lm_head.weight"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  // The language model reads as Llama under its canonical names, the tower left to the vision
  // import.
  auto src = frontend::ModelSource::open(dir_);
  QBC_ASSERT_OK(src);
  EXPECT_EQ(src->hparams().family, frontend::ModelFamily::kLlama);
  EXPECT_EQ(src->hparams().hidden_size, 24);
  EXPECT_TRUE(src->unexpected_tensors().empty());
  EXPECT_EQ(text, src->hparams().param_counts().total());
}

TEST(LlavaLanguageModel, RealConfigReadsVicunaFromLlamaDefaults) {
  QBC_REQUIRE_SHARED(config, "model-configs-new/llava-1.5-7b-hf/config.json");
  auto hp = frontend::load_hparams(config);
  QBC_ASSERT_OK(hp);
  EXPECT_EQ(hp->family, frontend::ModelFamily::kLlama);
  // text_config sets vocab 32064, 4096 positions, eps 1e-5; the rest is LlamaConfig's default
  // (Vicuna-7B v1.5: 32 layers x 4096, FFN 11008, 32 heads without GQA).
  EXPECT_EQ(hp->vocab_size, 32064);
  EXPECT_EQ(hp->max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(hp->rms_norm_eps, 1e-5);
  EXPECT_EQ(hp->num_hidden_layers, 32);
  EXPECT_EQ(hp->hidden_size, 4096);
  EXPECT_EQ(hp->intermediate_size, 11008);
  EXPECT_EQ(hp->num_attention_heads, 32);
  EXPECT_EQ(hp->num_key_value_heads, 32);
  EXPECT_FALSE(hp->tie_word_embeddings);
  EXPECT_DOUBLE_EQ(hp->rope_theta, 10000.0);
  // 6.74B parameters, Llama-2-7B's count with the 64 extra vocabulary rows (2 x 64 x 4096).
  EXPECT_EQ(hp->param_counts().total(), 6738415616 + 2 * 64 * 4096);
}

TEST(LlavaLanguageModel, OtherTextModelTypesAreRefused) {
  const std::string cfg = R"({"architectures": ["LlavaForConditionalGeneration"],
    "model_type": "llava", "text_config": {"model_type": "mistral"}, "vision_config": {}})";
  auto hp = frontend::parse_hparams(cfg, "cfg.json");
  ASSERT_FALSE(hp.ok());
  EXPECT_EQ(hp.status().code(), Code::kUnimplemented);
  EXPECT_TRUE(testing::contains(hp.status().message(), "text_config.model_type"))
      << hp.status().to_string();
}

}  // namespace
}  // namespace qbc
