// The Qwen3-VL vision MBLT graph (frontend::build_qwen_vision_graph with the Qwen3-VL tower:
// biased patch embedding, learned positions interpolated on the host, LayerNorm blocks with a
// tanh-GELU MLP, DeepStack mergers) run by the float reference session against a float64
// forward pass written from HF's modeling_qwen3_vl.py (naive_qwen3_vision.h), on a shared
// photograph preprocessed by image::preprocess and a small random checkpoint written from the
// real Qwen3-VL-4B config with a tiny tower.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "naive_qwen3_vision.h"
#include "qbc/frontend/qwen_vision.h"
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

class Qwen3Vision : public testing::VisionFolderTest {
 protected:
  // deepstack_visual_indexes [5, 11, 17] of 24 blocks scaled to [0, 1, 2] of 3.
  void SetUp() override { write("qwen3_vision_random", 3, std::nullopt); }

  // A random folder from the real config with a tower of `depth` blocks (taps scaled, or
  // `taps`).
  void write(const std::string& name, int64_t depth, std::optional<std::vector<int64_t>> taps) {
    QBC_REQUIRE_SHARED(config, "model-configs-new/Qwen3-VL-4B-Instruct/config.json");
    QBC_REQUIRE_SHARED(prep, "model-configs-new/Qwen3-VL-4B-Instruct/preprocessor_config.json");
    QBC_REQUIRE_SHARED(photo, "data/images/chelsea.png");
    dir_ = testing::temp_dir() / name;
    frontend::RandomModelOptions o;
    o.config_path = config;
    o.output_dir = dir_;
    o.seed = 11;
    o.init_std = 0.1;  // large enough that attention is far from uniform
    o.overrides.vision.depth = depth;
    o.overrides.vision.deepstack_visual_indexes = std::move(taps);
    o.overrides.vision.hidden_size = 32;
    o.overrides.vision.num_heads = 2;  // head_dim 16
    o.overrides.vision.intermediate_size = 48;
    o.overrides.vision.out_hidden_size = 24;
    testing::shrink_language_model(o.overrides);
    o.overrides.head_dim = 16;  // Qwen3's text head_dim is explicit in the config
    QBC_ASSERT_OK(frontend::write_random_model(o));
    open_folder(prep, photo);
  }

  ref::testing::NaiveQwen3VisionOut reference() const {
    ref::testing::NaiveQwen3VisionDims d;
    d.depth = vc_.depth;
    d.hidden = vc_.width;
    d.heads = vc_.heads;
    d.ffn = vc_.ffn;
    d.out_hidden = vc_.text_hidden;
    d.patch = vc_.patch_size;
    d.num_position_embeddings = vc_.position_embeddings;
    d.deepstack = vc_.deepstack_layers;
    return ref::testing::naive_qwen3_vision(
        d, [this](const std::string& n) { return hf(n); }, pixels_.values, pixels_.grid_h,
        pixels_.grid_w);
  }

  frontend::VisionGrid grid() const { return {1, pixels_.grid_h, pixels_.grid_w}; }

  // The session's image features and DeepStack features (HF row order: Qwen3-VL has no
  // windows). `base` replaces the interpolated position rows when given.
  void run_graph(bool f64, std::vector<float>* features, std::vector<std::vector<float>>* deep,
                 const std::vector<float>* base = nullptr) const {
    auto layout = frontend::qwen_vision_layout(vc_, grid());
    QBC_ASSERT_OK(layout);
    auto g = frontend::build_qwen_vision_graph(vc_, *layout);
    QBC_ASSERT_OK(g);
    QBC_ASSERT_OK(ir::verify(*g));
    auto pos = frontend::qwen3_position_rows(vc_, grid(), hf("visual.pos_embed.weight"));
    QBC_ASSERT_OK(pos);
    const ir::WeightReader reader = [this](const ir::Weight& w, std::vector<float>* v) {
      return ckpt_->read_f32(w.tensor, v);
    };
    ref::SessionOptions so;
    so.float64 = f64;
    auto session = ref::Session::create(*g, reader, so);
    QBC_ASSERT_OK(session);
    (*session)->set_keep_activations(true);
    // The outputs side by side per row: the features, then each DeepStack level.
    std::vector<float> wide;
    QBC_ASSERT_OK((*session)->forward_inputs(
        {pixels_.values, layout->cos, layout->sin, base != nullptr ? *base : *pos}, &wide));
    const auto h = static_cast<size_t>(vc_.text_hidden);
    const size_t levels = vc_.deepstack_layers.size(), w = h * (1 + levels);
    ASSERT_EQ(wide.size() % w, 0u);
    const size_t rows = wide.size() / w;
    features->assign(rows * h, 0.0f);
    deep->assign(levels, std::vector<float>(rows * h, 0.0f));
    for (size_t r = 0; r < rows; ++r) {
      std::copy(wide.begin() + r * w, wide.begin() + r * w + h, features->begin() + r * h);
      for (size_t j = 0; j < levels; ++j)
        std::copy(wide.begin() + r * w + (j + 1) * h, wide.begin() + r * w + (j + 2) * h,
                  (*deep)[j].begin() + r * h);
    }
    for (size_t j = 0; j < levels; ++j) {  // each level's columns are its merger's output
      std::vector<float> kept;
      QBC_ASSERT_OK(
          (*session)->activation("deepstack_features." + std::to_string(j), &kept, nullptr));
      EXPECT_EQ(kept, (*deep)[j]) << "level " << j;
    }
  }
};

TEST_F(Qwen3Vision, ConfigReadsTheTowerAndTheShrunkDeepStackTaps) {
  EXPECT_EQ(vc_.tower, frontend::VisionTower::kQwen3Vit);
  EXPECT_EQ(vc_.width, 32);
  EXPECT_EQ(vc_.ffn, 48);
  EXPECT_EQ(vc_.text_hidden, 24);
  EXPECT_EQ(vc_.patch_size, 16);
  EXPECT_EQ(vc_.hidden_act, "gelu_pytorch_tanh");
  EXPECT_EQ(vc_.position_embeddings, 2304);
  EXPECT_EQ(vc_.deepstack_layers, (std::vector<int64_t>{0, 1, 2}));
  // chelsea 451x300 -> smart_resize to multiples of 32: 448x288, 28 x 18 patches of 16.
  EXPECT_EQ(pixels_.grid_h, 18);
  EXPECT_EQ(pixels_.grid_w, 28);
  auto layout = frontend::qwen_vision_layout(vc_, grid());
  QBC_ASSERT_OK(layout);
  EXPECT_TRUE(layout->window_tokens.empty());
  auto g = frontend::build_qwen_vision_graph(vc_, *layout);
  QBC_ASSERT_OK(g);
  EXPECT_EQ(g->name(), "qwen3_vl_vision");
  ASSERT_EQ(g->outputs().size(), 4u);  // image_features, then one per DeepStack tap
  EXPECT_EQ(g->node(g->outputs()[0]).name, "image_features");
  EXPECT_EQ(g->node(g->outputs()[3]).name, "deepstack_features.2");
}

TEST_F(Qwen3Vision, FloatSessionMatchesHfFloat64Reference) {
  const ref::testing::NaiveQwen3VisionOut want = reference();
  const size_t rows = static_cast<size_t>(pixels_.grid_h * pixels_.grid_w / 4);
  ASSERT_EQ(want.features.size(), rows * static_cast<size_t>(vc_.text_hidden));
  ASSERT_EQ(want.deepstack.size(), 3u);
  double scale = 0.0;
  for (double v : want.features) scale = std::max(scale, std::abs(v));
  EXPECT_GT(scale, 0.1);
  for (const bool f64 : {false, true}) {
    std::vector<float> got;
    std::vector<std::vector<float>> deep;
    run_graph(f64, &got, &deep);
    ASSERT_EQ(got.size(), want.features.size());
    const double tol = f64 ? 5e-7 : 5e-6;
    EXPECT_LE(rel_error(got, want.features), tol) << (f64 ? "float64" : "float32");
    ASSERT_EQ(deep.size(), want.deepstack.size());
    for (size_t j = 0; j < deep.size(); ++j) {
      ASSERT_EQ(deep[j].size(), want.deepstack[j].size()) << j;
      const double err = rel_error(deep[j], want.deepstack[j]);
      std::printf("[qwen3_vision] %s deepstack %zu rel_err %.2e\n", f64 ? "f64" : "f32", j, err);
      EXPECT_LE(err, tol) << "deepstack " << j << (f64 ? " float64" : " float32");
    }
  }
}

TEST_F(Qwen3Vision, TapsThatAreNotTheFirstBlocksTakeTheirOwnBlocksOutput) {
  // 4 blocks with taps [1, 3]: merger 0 reads block 1, merger 1 block 3 (a mix-up of the
  // block and the tap index would read blocks 0 and 1).
  write("qwen3_vision_taps", 4, std::vector<int64_t>{1, 3});
  ASSERT_EQ(vc_.deepstack_layers, (std::vector<int64_t>{1, 3}));
  const ref::testing::NaiveQwen3VisionOut want = reference();
  std::vector<float> got;
  std::vector<std::vector<float>> deep;
  run_graph(true, &got, &deep);
  EXPECT_LE(rel_error(got, want.features), 5e-7);
  ASSERT_EQ(deep.size(), 2u);
  for (size_t j = 0; j < 2; ++j) EXPECT_LE(rel_error(deep[j], want.deepstack[j]), 5e-7) << j;
  EXPECT_GT(rel_error(deep[0], want.deepstack[1]), 1e-3);  // the taps differ
}

TEST_F(Qwen3Vision, PositionRowsMatter) {
  // Without the learned positions the reference must tell the graphs apart, so the tolerance
  // above cannot pass by accident.
  const ref::testing::NaiveQwen3VisionOut want = reference();
  const std::vector<float> zeros(static_cast<size_t>(pixels_.grid_h * pixels_.grid_w * vc_.width));
  std::vector<float> got;
  std::vector<std::vector<float>> deep;
  run_graph(false, &got, &deep, &zeros);
  EXPECT_GT(rel_error(got, want.features), 1e-3);
  EXPECT_GT(rel_error(deep[0], want.deepstack[0]), 1e-3);
}

TEST_F(Qwen3Vision, PositionRowsAtTheTablesOwnGridAreItsRowsInMergeOrder) {
  const std::vector<float> table = hf("visual.pos_embed.weight");
  auto rows = frontend::qwen3_position_rows(vc_, {1, 48, 48}, table);
  QBC_ASSERT_OK(rows);
  ASSERT_EQ(rows->size(), table.size());
  // Merge group (a, b), patch (i, j) of it is row (2a + i, 2b + j) of the 48 x 48 grid.
  const int64_t w = vc_.width;
  for (const auto& [a, b, i, j] : {std::tuple{0, 0, 0, 0}, std::tuple{0, 0, 1, 1},
                                   std::tuple{3, 7, 0, 1}, std::tuple{23, 23, 1, 1}}) {
    const int64_t row = ((a * 24 + b) * 2 + i) * 2 + j, src = (2 * a + i) * 48 + 2 * b + j;
    for (int64_t e = 0; e < w; ++e)
      ASSERT_EQ((*rows)[static_cast<size_t>(row * w + e)], table[static_cast<size_t>(src * w + e)])
          << a << "," << b << "," << i << "," << j << " e " << e;
  }
  // A table that is not a square grid of the width is refused, naming the tensor.
  const std::vector<float> bad(table.begin(), table.end() - w);
  auto refused = frontend::qwen3_position_rows(vc_, grid(), bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(testing::contains(refused.status().message(), "visual.pos_embed.weight"));
}

TEST_F(Qwen3Vision, RandomCheckpointHoldsEveryVisionTensor) {
  std::vector<std::string> names;
  int64_t total = 0;
  for (const auto& t : ckpt_->tensors()) {
    names.push_back(t.name);
    if (t.name.rfind("visual.", 0) == 0) total += t.num_elements();
  }
  EXPECT_EQ(total, vc_.parameters());
  for (const char* want : {"visual.patch_embed.proj.bias", "visual.pos_embed.weight",
                           "visual.blocks.2.norm1.bias", "visual.blocks.2.mlp.linear_fc2.bias",
                           "visual.merger.norm.weight", "visual.deepstack_merger_list.2.norm.bias",
                           "visual.deepstack_merger_list.0.linear_fc2.weight"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
}

TEST_F(Qwen3Vision, DeepStackTapsOutsideTheTowerAreRefused) {
  QBC_REQUIRE_SHARED(config, "model-configs-new/Qwen3-VL-4B-Instruct/config.json");
  frontend::RandomModelOptions o;
  o.config_path = config;
  o.output_dir = testing::temp_dir() / "qwen3_vision_bad_taps";
  o.overrides.vision.depth = 3;
  o.overrides.vision.hidden_size = 32;
  o.overrides.vision.num_heads = 2;
  o.overrides.vision.deepstack_visual_indexes = std::vector<int64_t>{1, 3};
  testing::shrink_language_model(o.overrides);
  o.overrides.head_dim = 16;
  const Status s = frontend::write_random_model(o);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(testing::contains(s.message(), "deepstack_visual_indexes")) << s.to_string();
}

}  // namespace
}  // namespace qbc
