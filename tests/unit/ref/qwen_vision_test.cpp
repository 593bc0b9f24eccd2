// The Qwen2.5-VL and Qwen2-VL vision MBLT graphs (frontend::build_qwen_vision_graph) run by the
// float reference session against a float64 forward pass written from HF's modeling code
// (naive_qwen_vision.h), on a shared photograph preprocessed by image::preprocess and a small
// random checkpoint written from the real config with a tiny tower (Qwen2.5-VL-3B's from the
// shared folder, Qwen2-VL-2B's from tests/assets/model-configs).
#include "qbc/frontend/qwen_vision.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "naive_qwen_vision.h"
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

class QwenVisionBase : public testing::VisionFolderTest {
 protected:
  // Writes the random folder from `config` with a 3-block tower of width 32 (2 heads of 16).
  void write(const fs::path& config, const fs::path& prep, const fs::path& photo,
             const std::string& name, frontend::VisionOverrides tower) {
    dir_ = testing::temp_dir() / name;
    frontend::RandomModelOptions o;
    o.config_path = config;
    o.output_dir = dir_;
    o.seed = 7;
    o.init_std = 0.1;  // large enough that attention is far from uniform
    o.overrides.vision = std::move(tower);
    o.overrides.vision.depth = 3;
    o.overrides.vision.hidden_size = 32;
    o.overrides.vision.num_heads = 2;  // head_dim 16
    o.overrides.vision.out_hidden_size = 24;
    // The language model is written too: keep it tiny (its width is the tower's out width).
    testing::shrink_language_model(o.overrides);  // the projector writes its width
    QBC_ASSERT_OK(frontend::write_random_model(o));
    open_folder(prep, photo);
  }

  std::vector<double> reference(const std::vector<int64_t>& fullatt) const {
    ref::testing::NaiveVisionDims d;
    d.qwen2 = vc_.tower == frontend::VisionTower::kQwen2Vit;
    d.depth = vc_.depth;
    d.hidden = vc_.width;
    d.heads = vc_.heads;
    d.ffn = vc_.ffn;
    d.out_hidden = vc_.text_hidden;
    d.fullatt_blocks = fullatt;
    return ref::testing::naive_qwen_vision(
        d, [this](const std::string& n) { return hf(n); }, pixels_.values, pixels_.grid_h,
        pixels_.grid_w);
  }

  // The session's image features in HF row order.
  void run_graph(const frontend::VisionConfig& vc, bool f64, std::vector<float>* out) const {
    const frontend::VisionGrid grid{pixels_.grid_t, pixels_.grid_h, pixels_.grid_w};
    auto layout = frontend::qwen_vision_layout(vc, grid);
    QBC_ASSERT_OK(layout);
    auto g = frontend::build_qwen_vision_graph(vc, *layout);
    QBC_ASSERT_OK(g);
    QBC_ASSERT_OK(ir::verify(*g));
    const ir::WeightReader reader = [this](const ir::Weight& w, std::vector<float>* v) {
      return ckpt_->read_f32(w.tensor, v);
    };
    ref::SessionOptions so;
    so.float64 = f64;
    auto session = ref::Session::create(*g, reader, so);
    QBC_ASSERT_OK(session);
    const int64_t unit = vc.merge * vc.merge;
    const std::vector<float> rows = frontend::qwen_window_rows(
        pixels_.values, pixels_.shape[1], unit, layout->window_index, /*inverse=*/false);
    std::vector<float> got;
    QBC_ASSERT_OK((*session)->forward_inputs({rows, layout->cos, layout->sin}, &got));
    *out =
        frontend::qwen_window_rows(got, vc.text_hidden, 1, layout->window_index, /*inverse=*/true);
  }

  // The float session against the float64 reference in float32 and float64 modes: float64
  // mode still takes float32 pixels and rotary tables, as HF computes its angles in float32;
  // float32 mode adds the session's own rounding.
  void expect_matches_reference(const std::vector<int64_t>& fullatt, const char* tag) const {
    const std::vector<double> want = reference(fullatt);
    ASSERT_EQ(want.size(),
              static_cast<size_t>(pixels_.grid_h * pixels_.grid_w / 4 * vc_.text_hidden));
    double scale = 0.0;
    for (double v : want) scale = std::max(scale, std::abs(v));
    EXPECT_GT(scale, 0.1);
    for (const bool f64 : {false, true}) {
      std::vector<float> got;
      run_graph(vc_, f64, &got);
      ASSERT_EQ(got.size(), want.size());
      const double err = rel_error(got, want);
      std::printf("[%s] %s rel_err %.2e (max|feature| %.3f)\n", tag, f64 ? "f64" : "f32", err,
                  scale);
      EXPECT_LE(err, f64 ? 5e-7 : 5e-6) << (f64 ? "float64" : "float32");
    }
  }
};

class Qwen25Vision : public QwenVisionBase {
 protected:
  void SetUp() override {
    QBC_REQUIRE_SHARED(config, "model-configs-new/Qwen2.5-VL-3B-Instruct/config.json");
    QBC_REQUIRE_SHARED(prep, "model-configs-new/Qwen2.5-VL-3B-Instruct/preprocessor_config.json");
    QBC_REQUIRE_SHARED(photo, "data/images/chelsea.png");
    frontend::VisionOverrides tower;
    tower.intermediate_size = 48;
    tower.fullatt_block_indexes = std::vector<int64_t>{1};  // blocks 0, 2: windows
    write(config, prep, photo, "qwen25_vision_random", tower);
  }
};

// Qwen2-VL-2B's published config (tests/assets/model-configs/README.md gives its sources).
class Qwen2Vision : public QwenVisionBase {
 protected:
  void SetUp() override {
    const fs::path folder =
        testing::source_dir() / "tests/assets/model-configs/Qwen2-VL-2B-Instruct";
    QBC_REQUIRE_SHARED(photo, "data/images/chelsea.png");
    frontend::VisionOverrides tower;
    tower.intermediate_size = 64;  // embed_dim 32 x mlp_ratio 2
    write(folder / "config.json", folder / "preprocessor_config.json", photo, "qwen2_vision_random",
          tower);
  }
};

TEST_F(Qwen25Vision, GridHasSeveralWindowsAndBothAttentionKinds) {
  // chelsea 451x300 -> 308x448: 22 x 32 patches, 11 x 16 merged, windows of 4 x 4 merged.
  EXPECT_EQ(pixels_.grid_h, 22);
  EXPECT_EQ(pixels_.grid_w, 32);
  auto layout = frontend::qwen_vision_layout(vc_, {1, pixels_.grid_h, pixels_.grid_w});
  QBC_ASSERT_OK(layout);
  EXPECT_EQ(layout->window_tokens.size(), 12u);  // 3 rows x 4 columns of windows
  EXPECT_EQ(layout->window_tokens.front(), 64);  // 4 x 4 merged groups x 4 patches
  EXPECT_EQ(layout->window_tokens.back(), 48);   // the cut-short corner: 3 x 4 groups
  EXPECT_EQ(vc_.full_attention_blocks, std::vector<int64_t>{1});
  EXPECT_EQ(vc_.depth, 3);
}

TEST_F(Qwen25Vision, FloatSessionMatchesHfFloat64Reference) {
  expect_matches_reference(vc_.full_attention_blocks, "qwen25_vision");
}

TEST_F(Qwen25Vision, WrongAttentionKindIsDetected) {
  // The same weights with every block windowed: the reference must tell the graphs apart, so
  // the tolerance above cannot pass by accident.
  const std::vector<double> want = reference(vc_.full_attention_blocks);
  frontend::VisionConfig all_window = vc_;
  all_window.full_attention_blocks.clear();
  std::vector<float> got;
  run_graph(all_window, false, &got);
  EXPECT_GT(rel_error(got, want), 1e-3);
}

TEST_F(Qwen25Vision, OtherTowersAreRefusedNamingThem) {
  frontend::VisionConfig other = vc_;
  other.tower = frontend::VisionTower::kSiglip;
  auto layout = frontend::qwen_vision_layout(vc_, {1, pixels_.grid_h, pixels_.grid_w});
  QBC_ASSERT_OK(layout);
  auto g = frontend::build_qwen_vision_graph(other, *layout);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), Code::kUnimplemented);
  EXPECT_TRUE(testing::contains(g.status().message(), "SigLIP")) << g.status().to_string();
}

TEST_F(Qwen25Vision, RandomCheckpointHoldsEveryVisionTensor) {
  std::vector<std::string> names;
  int64_t total = 0, text = 0;
  for (const auto& t : ckpt_->tensors()) {
    names.push_back(t.name);
    (t.name.rfind("visual.", 0) == 0 ? total : text) += t.num_elements();
  }
  EXPECT_EQ(total, vc_.parameters());
  // The language model next to it: embed 64 x 24 (tied), one block, the final norm.
  const int64_t block = 24 * 24 + 24 + 2 * (24 * 12 + 12) + 24 * 24 + 3 * 24 * 32 + 2 * 24;
  EXPECT_EQ(text, 64 * 24 + block + 24);
  EXPECT_NE(std::find(names.begin(), names.end(), "visual.patch_embed.proj.weight"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "visual.blocks.2.mlp.down_proj.bias"),
            names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "visual.merger.mlp.2.weight"), names.end());
}

TEST_F(Qwen2Vision, ConfigReadsTheQwen2TowerAndTheLayoutIsTheIdentity) {
  EXPECT_EQ(vc_.tower, frontend::VisionTower::kQwen2Vit);
  EXPECT_EQ(vc_.width, 32);
  EXPECT_EQ(vc_.ffn, 64);
  EXPECT_EQ(vc_.text_hidden, 24);  // vision_config.hidden_size: the merger's output
  EXPECT_EQ(vc_.hidden_act, "quick_gelu");
  auto layout = frontend::qwen_vision_layout(vc_, {1, pixels_.grid_h, pixels_.grid_w});
  QBC_ASSERT_OK(layout);
  EXPECT_TRUE(layout->window_tokens.empty());
  ASSERT_EQ(layout->window_index.size(), static_cast<size_t>(pixels_.grid_h * pixels_.grid_w / 4));
  for (size_t k = 0; k < layout->window_index.size(); ++k)
    ASSERT_EQ(layout->window_index[k], static_cast<int64_t>(k));
  auto g = frontend::build_qwen_vision_graph(vc_, *layout);
  QBC_ASSERT_OK(g);
  EXPECT_EQ(g->name(), "qwen2_vl_vision");
}

TEST_F(Qwen2Vision, FloatSessionMatchesHfFloat64Reference) {
  expect_matches_reference({}, "qwen2_vision");
}

TEST_F(Qwen2Vision, WrongActivationIsDetected) {
  // The erf GELU in place of quick_gelu: the reference must tell them apart.
  const std::vector<double> want = reference({});
  frontend::VisionConfig erf = vc_;
  erf.hidden_act = "gelu";
  std::vector<float> got;
  run_graph(erf, false, &got);
  EXPECT_GT(rel_error(got, want), 1e-3);
}

TEST_F(Qwen2Vision, RandomCheckpointHoldsEveryVisionTensor) {
  std::vector<std::string> names;
  int64_t total = 0;
  for (const auto& t : ckpt_->tensors()) {
    names.push_back(t.name);
    if (t.name.rfind("visual.", 0) == 0) total += t.num_elements();
  }
  EXPECT_EQ(total, vc_.parameters());
  for (const char* want : {"visual.blocks.2.norm1.bias", "visual.blocks.2.mlp.fc1.weight",
                           "visual.blocks.2.mlp.fc2.bias", "visual.merger.ln_q.bias"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  EXPECT_EQ(std::find(names.begin(), names.end(), "visual.blocks.0.mlp.gate_proj.weight"),
            names.end());
}

TEST_F(Qwen2Vision, ShrinkingTheMlpToANonMultipleOfTheWidthIsRefused) {
  frontend::RandomModelOptions o;
  o.config_path =
      testing::source_dir() / "tests/assets/model-configs/Qwen2-VL-2B-Instruct/config.json";
  o.output_dir = testing::temp_dir() / "qwen2_vision_bad_ratio";
  o.overrides.vision.hidden_size = 32;
  o.overrides.vision.intermediate_size = 48;
  const Status s = frontend::write_random_model(o);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(testing::contains(s.message(), "mlp_ratio")) << s.to_string();
}

}  // namespace
}  // namespace qbc
