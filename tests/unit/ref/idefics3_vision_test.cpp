// Idefics3 / SmolVLM: the SigLIP + pixel-shuffle connector MBLT graph
// (frontend::build_idefics3_vision_graph) run by the float reference session against a float64
// forward pass written from HF's modeling code (naive_idefics3_vision.h), on a shared photograph
// preprocessed by image::preprocess with the real SmolVLM-256M-Instruct preprocessor_config.json
// (one 512x512 tile: a 32x32 patch grid, pixel-shuffled by 4 to 64 tokens), over a small random
// checkpoint written from the real SmolVLM-256M-Instruct config (tests/assets/model-configs).
#include "qbc/frontend/idefics3_vision.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "naive_idefics3_vision.h"
#include "qbc/frontend/gemma3_vision.h"
#include "qbc/frontend/model_source.h"
#include "qbc/frontend/random_model.h"
#include "qbc/frontend/safetensors.h"
#include "qbc/frontend/vision_config.h"
#include "qbc/image/image.h"
#include "qbc/image/preprocess.h"
#include "qbc/ir/verifier.h"
#include "qbc/ir/weight_reader.h"
#include "qbc/ref/session.h"
#include "rel_error.h"
#include "small_vlm.h"
#include "test_support.h"
#include "vision_folder_test.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;

using ref::testing::rel_error;

constexpr const char* kPositions = "model.vision_model.embeddings.position_embedding.weight";

class Idefics3Vision : public testing::VisionFolderTest {
 protected:
  void SetUp() override {
    QBC_REQUIRE_SHARED(photo, "data/images/chelsea.png");
    const fs::path assets =
        testing::source_dir() / "tests/assets/model-configs/SmolVLM-256M-Instruct";
    dir_ = testing::temp_dir() / "idefics3_vision_random";
    frontend::RandomModelOptions o;
    o.config_path = assets / "config.json";
    o.output_dir = dir_;
    o.seed = 29;
    o.init_std = 0.1;  // large enough that attention is far from uniform
    o.overrides.vision.depth = 2;
    o.overrides.vision.hidden_size = 32;
    o.overrides.vision.num_heads = 2;             // head_dim 16
    o.overrides.vision.intermediate_size = 43;    // like 3072, but a multiple of no group size
    testing::shrink_language_model(o.overrides);  // the connector writes its width
    o.overrides.head_dim = 12;                    // the config sets 64
    QBC_ASSERT_OK(frontend::write_random_model(o));
    open_folder(assets / "preprocessor_config.json", photo);
    if (HasFatalFailure()) return;
    // The tower takes one tile of its own side (vision_config.image_size).
    ASSERT_EQ(pixels_.shape, (std::vector<int64_t>{3, 512, 512}));
  }

  // Memoized per process (every test writes the same checkpoint from the same seed).
  std::vector<double> reference(bool tanh_gelu = true) const {
    static std::vector<double> cached[2];
    std::vector<double>& c = cached[tanh_gelu ? 1 : 0];
    if (c.empty()) c = compute_reference(tanh_gelu);
    return c;
  }

  std::vector<double> compute_reference(bool tanh_gelu) const {
    ref::testing::NaiveIdefics3VisionDims d;
    d.depth = vc_.depth;
    d.hidden = vc_.width;
    d.heads = vc_.heads;
    d.ffn = vc_.ffn;
    d.text_hidden = vc_.text_hidden;
    d.patch = vc_.patch_size;
    d.image = pixels_.shape[1];
    d.scale = 4;   // the real config's scale_factor
    d.eps = 1e-6;  // the real config's layer_norm_eps
    d.tanh_gelu = tanh_gelu;
    return ref::testing::naive_idefics3_image_features(
        d, [this](const std::string& n) { return hf(n); }, pixels_.values);
  }

  // The session's image features of the tile. `grouped` false feeds the patch rows and the
  // position table in plain row-major order instead of pixel-shuffle group order.
  void run_graph(const frontend::VisionConfig& vc, bool f64, std::vector<float>* out,
                 bool grouped = true) const {
    auto g = frontend::build_idefics3_vision_graph(vc);
    QBC_ASSERT_OK(g);
    QBC_ASSERT_OK(ir::verify(*g));
    const frontend::TensorFloats read = [this](const std::string& n, std::vector<float>* v) {
      return ckpt_->read_f32(n, v);
    };
    const ir::WeightReader reader = [read](const ir::Weight& w, std::vector<float>* v) {
      return read(w.tensor, v);
    };
    ref::SessionOptions so;
    so.float64 = f64;
    auto session = ref::Session::create(*g, reader, so);
    QBC_ASSERT_OK(session);
    const int64_t side = pixels_.shape[1];
    std::vector<float> rows, base;
    if (grouped) {
      rows = frontend::idefics3_patch_rows(pixels_.values, side, vc.patch_size, vc.merge);
      auto b = frontend::idefics3_embed_base(vc, read);
      QBC_ASSERT_OK(b);
      base = std::move(*b);
    } else {
      rows = frontend::siglip_patch_rows(pixels_.values, side, vc.patch_size);
      QBC_ASSERT_OK(read(kPositions, &base));
    }
    QBC_ASSERT_OK((*session)->forward_inputs({rows, base}, out));
  }
};

TEST_F(Idefics3Vision, ConfigGivesSixteenTilesAndAGlobalViewOf64Tokens) {
  EXPECT_EQ(vc_.tower, frontend::VisionTower::kSiglip);
  EXPECT_EQ(vc_.projector, frontend::VisionProjector::kPixelShuffle);
  EXPECT_EQ(vc_.tile_size, 512);
  EXPECT_EQ(vc_.tower_size(), 512);
  EXPECT_EQ(vc_.image_size, 2048);  // size.longest_edge: 4 tiles per side
  EXPECT_EQ(vc_.patch_size, 16);
  EXPECT_EQ(vc_.merge, 4);               // scale_factor
  EXPECT_EQ(vc_.views(), 17);            // 4 x 4 tiles and the global view
  EXPECT_EQ(vc_.tokens_per_view(), 64);  // processor_config.json's image_seq_len
  EXPECT_EQ(vc_.tokens_per_image(), 17 * 64);
  EXPECT_EQ(vc_.position_embeddings, 32 * 32);
  EXPECT_EQ(vc_.hidden_act, "gelu_pytorch_tanh");
  EXPECT_DOUBLE_EQ(vc_.norm_eps, 1e-6);
  EXPECT_EQ(vc_.width, 32);
  EXPECT_EQ(vc_.depth, 2);
  EXPECT_EQ(vc_.heads, 2);
  EXPECT_EQ(vc_.ffn, 43);
  EXPECT_EQ(vc_.text_hidden, 24);
  auto g = frontend::build_idefics3_vision_graph(vc_);
  QBC_ASSERT_OK(g);
  ASSERT_EQ(g->outputs().size(), 1u);
  EXPECT_EQ(g->node(g->outputs()[0]).type.dims, (std::vector<int64_t>{1, 64, 24}));
  const ir::ValueId patches = g->find("patches"), base = g->find("embed_base");
  ASSERT_GE(patches, 0);
  ASSERT_GE(base, 0);
  EXPECT_EQ(g->node(patches).type.dims, (std::vector<int64_t>{1, 1024, 3 * 16 * 16}));
  EXPECT_EQ(g->node(base).type.dims, (std::vector<int64_t>{1, 1024, 32}));
  const frontend::Idefics3VisionNames names;
  EXPECT_EQ(names.tower, "model.vision_model.");
  EXPECT_EQ(names.connector, "model.connector.");
}

TEST_F(Idefics3Vision, FloatSessionMatchesHfFloat64Reference) {
  const std::vector<double> want = reference();
  ASSERT_EQ(want.size(), static_cast<size_t>(64 * vc_.text_hidden));
  double scale = 0.0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  EXPECT_GT(scale, 0.1);
  for (const bool f64 : {false, true}) {
    std::vector<float> got;
    run_graph(vc_, f64, &got);
    ASSERT_EQ(got.size(), want.size());
    const double err = rel_error(got, want);
    std::printf("[idefics3_vision] %s rel_err %.2e (max|feature| %.3f)\n", f64 ? "f64" : "f32", err,
                scale);
    EXPECT_LE(err, f64 ? 5e-7 : 5e-6) << (f64 ? "float64" : "float32");
  }
}

TEST_F(Idefics3Vision, RowMajorPatchesOrErfGeluAreDetected) {
  // The tolerance above cannot pass by accident. Patch rows in row-major order (the position
  // table alike) give the encoder the same tile, but the connector then joins 16 patches of
  // one grid row instead of a 4 x 4 block: the features differ at the scale of the features.
  const std::vector<double> want = reference();
  std::vector<float> got;
  run_graph(vc_, false, &got, /*grouped=*/false);
  ASSERT_EQ(got.size(), want.size());
  const double row_major = rel_error(got, want);
  EXPECT_GT(row_major, 1e-2);
  // The erf GELU is close to the tanh one, but not within ten times the float32 tolerance.
  frontend::VisionConfig erf = vc_;
  erf.hidden_act = "gelu";
  run_graph(erf, false, &got);
  ASSERT_EQ(got.size(), want.size());
  const double erf_err = rel_error(got, want);
  std::printf("[idefics3_vision] row-major rel_err %.2e, erf GELU rel_err %.2e\n", row_major,
              erf_err);
  EXPECT_GT(erf_err, 5e-5);
  EXPECT_LE(rel_error(got, reference(false)), 5e-6);  // and the erf reference agrees with it
}

TEST_F(Idefics3Vision, OtherPartsAreRefused) {
  frontend::VisionConfig gemma = vc_;
  gemma.projector = frontend::VisionProjector::kGemmaSoftEmb;
  auto g = frontend::build_idefics3_vision_graph(gemma);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), Code::kUnimplemented);
  frontend::VisionConfig relu = vc_;
  relu.hidden_act = "relu";
  g = frontend::build_idefics3_vision_graph(relu);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), Code::kUnimplemented);
  EXPECT_TRUE(testing::contains(g.status().message(), "relu")) << g.status().to_string();
  // A tile grid whose position ids HF's bucketize puts out of row-major order (29 x 29: float32
  // fractions fall below their boundaries) is refused; 27 x 27 and 26 x 26 are in order.
  for (const int64_t grid : {29, 27, 26}) {
    frontend::VisionConfig odd = vc_;
    odd.tile_size = odd.image_size = grid * odd.patch_size;
    odd.merge = 1;
    odd.position_grid = grid;
    odd.position_embeddings = grid * grid;
    g = frontend::build_idefics3_vision_graph(odd);
    EXPECT_EQ(g.ok(), grid != 29) << grid << ": " << g.status().to_string();
    if (grid == 29) {
      EXPECT_EQ(g.status().code(), Code::kUnimplemented);
      EXPECT_TRUE(testing::contains(g.status().message(), "29 x 29")) << g.status().to_string();
    }
  }
}

TEST_F(Idefics3Vision, RandomCheckpointHoldsEveryTensorUnderHfNames) {
  int64_t vision = 0, text = 0;
  std::vector<std::string> names;
  for (const auto& t : ckpt_->tensors()) {
    names.push_back(t.name);
    const bool v =
        t.name.rfind("model.vision_model.", 0) == 0 || t.name.rfind("model.connector.", 0) == 0;
    (v ? vision : text) += t.num_elements();
    if (!v) {
      EXPECT_TRUE(t.name.rfind("model.text_model.", 0) == 0 || t.name == "lm_head.weight")
          << t.name;
    }
    if (t.name == "model.connector.modality_projection.proj.weight")
      EXPECT_EQ(t.shape, (std::vector<int64_t>{24, 4 * 4 * 32}));  // [text, scale² · width]
    if (t.name == kPositions) EXPECT_EQ(t.shape, (std::vector<int64_t>{1024, 32}));
  }
  EXPECT_EQ(vision, vc_.parameters());
  for (const char* want : {"model.vision_model.embeddings.patch_embedding.weight",
                           "model.vision_model.embeddings.patch_embedding.bias", kPositions,
                           "model.vision_model.encoder.layers.1.mlp.fc2.bias",
                           "model.vision_model.encoder.layers.1.self_attn.out_proj.bias",
                           "model.vision_model.post_layernorm.weight",
                           "model.connector.modality_projection.proj.weight",
                           "model.text_model.embed_tokens.weight", "lm_head.weight"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  // The connector's linear has no bias.
  EXPECT_EQ(std::find(names.begin(), names.end(), "model.connector.modality_projection.proj.bias"),
            names.end());
  auto src = frontend::ModelSource::open(dir_);
  QBC_ASSERT_OK(src);
  EXPECT_EQ(src->hparams().family, frontend::ModelFamily::kLlama);
  EXPECT_EQ(src->hparams().hidden_size, 24);
  EXPECT_TRUE(src->unexpected_tensors().empty());
  EXPECT_EQ(text, src->hparams().param_counts().total());
  // The image token moved into the 64-token vocabulary.
  EXPECT_EQ(vc_.image_token_id, 63);
}

// shuffle_group_rows on a hand-built 4 x 4 grid, scale 2: each 2 x 2 block's patches
// consecutive, blocks row-major; HF's pixel_shuffle (the reference's literal view / permute /
// reshape steps) puts them side by side in the same order.
TEST(Idefics3PixelShuffle, GroupRowsFollowHfPixelShuffle) {
  std::vector<float> rows(16);
  std::vector<double> hf_rows(16);
  for (int i = 0; i < 16; ++i) rows[static_cast<size_t>(i)] = static_cast<float>(i);
  for (int i = 0; i < 16; ++i) hf_rows[static_cast<size_t>(i)] = i;
  const std::vector<float> want = {0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15};
  EXPECT_EQ(image::shuffle_group_rows(rows, /*width=*/1, /*grid=*/4, /*scale=*/2), want);
  const std::vector<double> hf = ref::testing::naive_idefics3_pixel_shuffle(hf_rows, 16, 1, 2);
  ASSERT_EQ(hf.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(hf[i], want[i]) << i;
  // Width 3: whole rows move (value 10 · patch + channel).
  std::vector<float> wide(16 * 3);
  std::vector<double> hf_wide(16 * 3);
  for (int p = 0; p < 16; ++p) {
    for (int c = 0; c < 3; ++c) {
      wide[static_cast<size_t>(p * 3 + c)] = static_cast<float>(10 * p + c);
      hf_wide[static_cast<size_t>(p * 3 + c)] = 10 * p + c;
    }
  }
  const std::vector<float> grouped = image::shuffle_group_rows(wide, 3, 4, 2);
  const std::vector<double> shuffled =
      ref::testing::naive_idefics3_pixel_shuffle(hf_wide, 16, 3, 2);
  ASSERT_EQ(grouped.size(), shuffled.size());
  for (size_t i = 0; i < grouped.size(); ++i) EXPECT_EQ(grouped[i], shuffled[i]) << i;
  EXPECT_EQ(grouped[3], 10.0f);  // the second row of token 0 is patch 1
  EXPECT_EQ(grouped[6], 40.0f);  // the third is patch 4 (the next grid row)
}

}  // namespace
}  // namespace qbc

namespace qbc {
namespace {

// A tile that is not a multiple of the patch (SmolVLM-Instruct, the 2B model: 384 / 14 with
// scale_factor 3, 81 tokens per tile; the 256M asset config with those three values changed and
// the processor's tile edge set to 384): HF's convolution is "valid", so the grid is 27 x 27 and
// the tile's last 6 pixel rows and columns are not read. The float session matches the float64
// reference (whose literal convolution stops at the grid), and the unread pixels change nothing.
class Idefics3Vision384 : public testing::VisionFolderTest {
 protected:
  void SetUp() override {
    QBC_REQUIRE_SHARED(photo, "data/images/chelsea.png");
    const fs::path assets =
        testing::source_dir() / "tests/assets/model-configs/SmolVLM-256M-Instruct";
    const fs::path cfg = testing::temp_dir() / "idefics3_384_config";
    fs::create_directories(cfg);
    nlohmann::json c = nlohmann::json::parse(testing::read_file(assets / "config.json"));
    c["vision_config"]["image_size"] = 384;
    c["vision_config"]["patch_size"] = 14;
    c["scale_factor"] = 3;
    testing::write_file(cfg / "config.json", c.dump(2));
    nlohmann::json p =
        nlohmann::json::parse(testing::read_file(assets / "preprocessor_config.json"));
    p["max_image_size"] = {{"longest_edge", 384}};
    p["size"] = {{"longest_edge", 1536}};
    testing::write_file(cfg / "preprocessor_config.json", p.dump(2));
    dir_ = testing::temp_dir() / "idefics3_384_random";
    frontend::RandomModelOptions o;
    o.config_path = cfg / "config.json";
    o.output_dir = dir_;
    o.seed = 31;
    o.init_std = 0.1;
    o.overrides.vision.depth = 2;
    o.overrides.vision.hidden_size = 32;
    o.overrides.vision.num_heads = 2;
    o.overrides.vision.intermediate_size = 43;
    testing::shrink_language_model(o.overrides);
    o.overrides.head_dim = 12;
    QBC_ASSERT_OK(frontend::write_random_model(o));
    open_folder(cfg / "preprocessor_config.json", photo);
    if (HasFatalFailure()) return;
    ASSERT_EQ(pixels_.shape, (std::vector<int64_t>{3, 384, 384}));
  }

  std::vector<float> features(const std::vector<float>& pixels, bool f64) const {
    auto g = frontend::build_idefics3_vision_graph(vc_);
    EXPECT_TRUE(g.ok()) << g.status().to_string();
    if (!g.ok()) return {};
    const frontend::TensorFloats read = [this](const std::string& n, std::vector<float>* v) {
      return ckpt_->read_f32(n, v);
    };
    const ir::WeightReader reader = [read](const ir::Weight& w, std::vector<float>* v) {
      return read(w.tensor, v);
    };
    ref::SessionOptions so;
    so.float64 = f64;
    auto session = ref::Session::create(*g, reader, so);
    EXPECT_TRUE(session.ok()) << session.status().to_string();
    if (!session.ok()) return {};
    auto base = frontend::idefics3_embed_base(vc_, read);
    EXPECT_TRUE(base.ok()) << base.status().to_string();
    if (!base.ok()) return {};
    std::vector<float> out;
    const Status s = (*session)->forward_inputs(
        {frontend::idefics3_patch_rows(pixels, 384, vc_.patch_size, vc_.merge), *base}, &out);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return out;
  }
};

TEST_F(Idefics3Vision384, AValidConvolutionGridMatchesHfFloat64Reference) {
  EXPECT_EQ(vc_.tile_size, 384);
  EXPECT_EQ(vc_.position_grid, 27);
  EXPECT_EQ(vc_.tokens_per_view(), 81);
  ref::testing::NaiveIdefics3VisionDims d;
  d.depth = vc_.depth;
  d.hidden = vc_.width;
  d.heads = vc_.heads;
  d.ffn = vc_.ffn;
  d.text_hidden = vc_.text_hidden;
  d.patch = 14;
  d.image = 384;
  d.scale = 3;
  d.eps = 1e-6;
  d.tanh_gelu = true;
  const std::vector<double> want = ref::testing::naive_idefics3_image_features(
      d, [this](const std::string& n) { return hf(n); }, pixels_.values);
  ASSERT_EQ(want.size(), static_cast<size_t>(81 * vc_.text_hidden));
  for (const bool f64 : {false, true}) {
    const std::vector<float> got = features(pixels_.values, f64);
    ASSERT_EQ(got.size(), want.size());
    const double err = rel_error(got, want);
    std::printf("[idefics3_vision 384/14] %s rel_err %.2e\n", f64 ? "f64" : "f32", err);
    EXPECT_LE(err, f64 ? 5e-7 : 5e-6) << (f64 ? "float64" : "float32");
  }
  // The 6 unread pixel rows and columns: changing them changes nothing.
  std::vector<float> edited = pixels_.values;
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 384; ++y)
      for (int64_t x = 378; x < 384; ++x) {
        edited[static_cast<size_t>((c * 384 + y) * 384 + x)] = 1.0f;
        edited[static_cast<size_t>((c * 384 + x) * 384 + y)] = -1.0f;
      }
  EXPECT_EQ(features(edited, false), features(pixels_.values, false));
}

}  // namespace
}  // namespace qbc
