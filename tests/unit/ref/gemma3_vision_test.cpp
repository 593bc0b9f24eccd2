// Gemma 3: the SigLIP + soft-embedding projector MBLT graph (frontend::build_gemma3_vision_graph)
// run by the float reference session against a float64 forward pass written from HF's modeling
// code (naive_gemma3_vision.h), on a shared photograph preprocessed by image::preprocess with the
// real preprocessor_config.json (896x896: a 64x64 patch grid pooled by 4 to 256 tokens), over a
// small random Gemma 3 checkpoint written from the real gemma-3-4b-it config.
#include "qbc/frontend/gemma3_vision.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "naive_gemma3_vision.h"
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

class Gemma3Vision : public testing::VisionFolderTest {
 protected:
  void SetUp() override {
    QBC_REQUIRE_SHARED(config, "model-configs-new/gemma-3-4b-it/config.json");
    QBC_REQUIRE_SHARED(prep, "model-configs-new/gemma-3-4b-it/preprocessor_config.json");
    QBC_REQUIRE_SHARED(photo, "data/images/chelsea.png");
    dir_ = testing::temp_dir() / "gemma3_vision_random";
    frontend::RandomModelOptions o;
    o.config_path = config;
    o.output_dir = dir_;
    o.seed = 13;
    o.init_std = 0.1;  // large enough that attention is far from uniform
    o.overrides.vision.depth = 2;
    o.overrides.vision.hidden_size = 32;
    o.overrides.vision.num_heads = 2;             // head_dim 16
    o.overrides.vision.intermediate_size = 43;    // like 4304, a multiple of no group size
    testing::shrink_language_model(o.overrides);  // the projector writes its width
    o.overrides.head_dim = 12;
    QBC_ASSERT_OK(frontend::write_random_model(o));
    open_folder(prep, photo);
  }

  // Memoized per process: the float64 forward over 4096 patches takes seconds.
  std::vector<double> reference(bool tanh_gelu = true) const {
    static std::vector<double> cached[2];
    std::vector<double>& c = cached[tanh_gelu ? 1 : 0];
    if (c.empty()) c = compute_reference(tanh_gelu);
    return c;
  }

  std::vector<double> compute_reference(bool tanh_gelu) const {
    ref::testing::NaiveGemma3VisionDims d;
    d.depth = vc_.depth;
    d.hidden = vc_.width;
    d.heads = vc_.heads;
    d.ffn = vc_.ffn;
    d.text_hidden = vc_.text_hidden;
    d.patch = vc_.patch_size;
    d.image = pixels_.shape[1];
    d.tokens_per_image = 256;  // the real config's mm_tokens_per_image
    d.tanh_gelu = tanh_gelu;
    return ref::testing::naive_gemma3_image_features(
        d, [this](const std::string& n) { return hf(n); }, pixels_.values);
  }

  // The session's image features; `transpose` false reads the projector weight as stored.
  void run_graph(const frontend::VisionConfig& vc, bool f64, std::vector<float>* out,
                 bool transpose = true) const {
    auto g = frontend::build_gemma3_vision_graph(vc);
    QBC_ASSERT_OK(g);
    QBC_ASSERT_OK(ir::verify(*g));
    const frontend::TensorFloats read = [this](const std::string& n, std::vector<float>* v) {
      return ckpt_->read_f32(n, v);
    };
    const ir::WeightReader reader = [read, transpose](const ir::Weight& w, std::vector<float>* v) {
      return transpose ? frontend::gemma3_read_vision_weight(read, w, v) : read(w.tensor, v);
    };
    ref::SessionOptions so;
    so.float64 = f64;
    auto session = ref::Session::create(*g, reader, so);
    QBC_ASSERT_OK(session);
    const std::vector<float> rows =
        frontend::siglip_patch_rows(pixels_.values, pixels_.shape[1], vc.patch_size);
    std::vector<float> base;
    QBC_ASSERT_OK(
        ckpt_->read_f32("vision_tower.vision_model.embeddings.position_embedding.weight", &base));
    QBC_ASSERT_OK((*session)->forward_inputs({rows, base}, out));
  }
};

TEST_F(Gemma3Vision, ConfigAndPreprocessingGiveThePooled896Grid) {
  EXPECT_EQ(pixels_.shape, (std::vector<int64_t>{3, 896, 896}));
  EXPECT_EQ(vc_.image_size, 896);
  EXPECT_EQ(vc_.position_embeddings, 64 * 64);  // no CLS
  EXPECT_EQ(vc_.pool, 4);                       // 64 patches per side / √256
  EXPECT_EQ(vc_.tokens_per_image(), 256);
  EXPECT_EQ(vc_.hidden_act, "gelu_pytorch_tanh");  // SiglipVisionConfig's default
  EXPECT_DOUBLE_EQ(vc_.norm_eps, 1e-6);            // SiglipVisionConfig's default
  EXPECT_EQ(vc_.text_hidden, 24);
  auto g = frontend::build_gemma3_vision_graph(vc_);
  QBC_ASSERT_OK(g);
  ASSERT_EQ(g->outputs().size(), 1u);
  EXPECT_EQ(g->node(g->outputs()[0]).type.dims, (std::vector<int64_t>{1, 256, 24}));
  EXPECT_EQ(g->metadata.at("vision.transposed_weights"),
            "multi_modal_projector.mm_input_projection_weight");
  const frontend::Gemma3VisionNames newer = frontend::gemma3_vision_names(true);
  EXPECT_EQ(newer.tower, "model.vision_tower.vision_model.");
  EXPECT_EQ(newer.projector, "model.multi_modal_projector.");
}

TEST_F(Gemma3Vision, FloatSessionMatchesHfFloat64Reference) {
  const std::vector<double> want = reference();
  ASSERT_EQ(want.size(), static_cast<size_t>(256 * vc_.text_hidden));
  double scale = 0.0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  EXPECT_GT(scale, 0.1);
  for (const bool f64 : {false, true}) {
    std::vector<float> got;
    run_graph(vc_, f64, &got);
    ASSERT_EQ(got.size(), want.size());
    const double err = rel_error(got, want);
    std::printf("[gemma3_vision] %s rel_err %.2e (max|feature| %.3f)\n", f64 ? "f64" : "f32", err,
                scale);
    EXPECT_LE(err, f64 ? 5e-7 : 5e-6) << (f64 ? "float64" : "float32");
  }
}

TEST_F(Gemma3Vision, WrongActivationOrUntransposedProjectionIsDetected) {
  // The tolerance above cannot pass by accident: the erf GELU differs by more than ten times
  // it (the two GELUs are close: measured 7.3e-5), the projector's weight read as stored by far
  // more.
  const std::vector<double> want = reference();
  frontend::VisionConfig erf = vc_;
  erf.hidden_act = "gelu";
  std::vector<float> got;
  run_graph(erf, false, &got);
  EXPECT_GT(rel_error(got, want), 5e-5);
  EXPECT_LE(rel_error(got, reference(false)), 5e-6);  // and the erf reference agrees with it
  run_graph(vc_, false, &got, /*transpose=*/false);
  EXPECT_GT(rel_error(got, want), 1e-3);
}

TEST_F(Gemma3Vision, OtherTowersAreRefused) {
  frontend::VisionConfig clip = vc_;
  clip.tower = frontend::VisionTower::kClip;
  auto g = frontend::build_gemma3_vision_graph(clip);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), Code::kUnimplemented);
  EXPECT_TRUE(testing::contains(g.status().message(), "CLIP")) << g.status().to_string();
  frontend::VisionConfig relu = vc_;
  relu.hidden_act = "relu";
  g = frontend::build_gemma3_vision_graph(relu);
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(testing::contains(g.status().message(), "relu")) << g.status().to_string();
}

TEST_F(Gemma3Vision, RandomCheckpointHoldsEveryTensorUnderHfNames) {
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
  for (const char* want : {"vision_tower.vision_model.embeddings.patch_embedding.bias",
                           "vision_tower.vision_model.encoder.layers.1.mlp.fc2.bias",
                           "vision_tower.vision_model.post_layernorm.weight",
                           "multi_modal_projector.mm_soft_emb_norm.weight",
                           "multi_modal_projector.mm_input_projection_weight",
                           "language_model.model.embed_tokens.weight"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  auto src = frontend::ModelSource::open(dir_);
  QBC_ASSERT_OK(src);
  EXPECT_EQ(src->hparams().family, frontend::ModelFamily::kGemma3);
  EXPECT_EQ(src->hparams().hidden_size, 24);
  EXPECT_TRUE(src->unexpected_tensors().empty());
  EXPECT_EQ(text, src->hparams().param_counts().total());
  // The image tokens moved into the 64-token vocabulary: image 63, boi 62, eoi 61.
  EXPECT_EQ(vc_.image_token_id, 63);
  EXPECT_EQ(vc_.image_start_token_id, 62);
  EXPECT_EQ(vc_.image_end_token_id, 61);
}

}  // namespace
}  // namespace qbc
