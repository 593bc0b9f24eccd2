// LLaVA with a SigLIP tower (llava-interleave-qwen-0.5b-hf): the vision MBLT graph
// (frontend::build_clip_vision_graph, SigLIP embeddings) run by the float reference session
// against a float64 forward pass written from HF's modeling code (naive_llava_siglip.h), on a
// shared photograph preprocessed by image::preprocess with the real preprocessor_config.json
// (SiglipImageProcessor, 384 x 384: a 27 x 27 patch grid of 14, the last 6 pixels of each side
// not read), over a small random checkpoint written from the real config
// (tests/assets/model-configs); and the language model read as Qwen2 from its text_config.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "naive_llava_siglip.h"
#include "qbc/frontend/clip_vision.h"
#include "qbc/frontend/gemma3_vision.h"
#include "qbc/frontend/hparams.h"
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

constexpr int64_t kGrid = 27;  // 384 / 14, HF's "valid" patch convolution
constexpr int64_t kPatches = kGrid * kGrid;

fs::path assets() {
  return testing::source_dir() / "tests/assets/model-configs/llava-interleave-qwen-0.5b-hf";
}

// Patch rows [grid², width] in column-major grid order: the rows of a transposed image.
std::vector<float> transpose_grid(const std::vector<float>& rows, int64_t grid, int64_t width) {
  std::vector<float> out(rows.size());
  for (int64_t y = 0; y < grid; ++y)
    for (int64_t x = 0; x < grid; ++x)
      std::copy_n(rows.begin() + (y * grid + x) * width, width,
                  out.begin() + (x * grid + y) * width);
  return out;
}

// What the reference computes besides the real config's choices.
struct Variant {
  int64_t feature_layer = -1;   // the real config's vision_feature_layer
  bool full = true;             // the real config's vision_feature_select_strategy
  bool tanh_gelu = true;        // false: the erf GELU in the tower
  bool post_layernorm = false;  // true: post_layernorm on the selected state
};

class LlavaSiglip : public testing::VisionFolderTest {
 protected:
  void SetUp() override {
    QBC_REQUIRE_SHARED(photo, "data/images/chelsea.png");
    dir_ = testing::temp_dir() / "llava_siglip_random";
    frontend::RandomModelOptions o;
    o.config_path = assets() / "config.json";
    o.output_dir = dir_;
    o.seed = 41;
    o.init_std = 0.1;  // large enough that attention is far from uniform
    o.overrides.vision.depth = 2;
    o.overrides.vision.hidden_size = 32;
    o.overrides.vision.num_heads = 2;             // head_dim 16
    o.overrides.vision.intermediate_size = 43;    // like 4304, but a multiple of no group size
    testing::shrink_language_model(o.overrides);  // the projector writes its width
    o.overrides.hidden_size = 64;                 // Qwen2: head_dim 32
    QBC_ASSERT_OK(frontend::write_random_model(o));
    open_folder(assets() / "preprocessor_config.json", photo);
    if (HasFatalFailure()) return;
    ASSERT_EQ(pixels_.shape, (std::vector<int64_t>{3, 384, 384}));
  }

  // The HF forward of the folder's config (or a variant of it) on the photograph; memoized per
  // process (every test writes the same checkpoint from the same seed).
  std::vector<double> reference(const Variant& v = Variant()) const {
    static std::map<std::string, std::vector<double>> cached;
    const std::string key = std::to_string(v.feature_layer) + (v.full ? "F" : "D") +
                            (v.tanh_gelu ? "T" : "E") + (v.post_layernorm ? "P" : "-");
    std::vector<double>& c = cached[key];
    if (!c.empty()) return c;
    ref::testing::NaiveLlavaSiglipDims d;
    d.depth = vc_.depth;
    d.hidden = vc_.width;
    d.heads = vc_.heads;
    d.ffn = vc_.ffn;
    d.text_hidden = vc_.text_hidden;
    d.patch = vc_.patch_size;
    d.image = pixels_.shape[1];
    d.eps = 1e-6;  // the real config's layer_norm_eps
    d.feature_layer = v.feature_layer;
    d.full = v.full;
    d.tanh_gelu = v.tanh_gelu;
    d.post_layernorm = v.post_layernorm;
    c = ref::testing::naive_llava_siglip_image_features(
        d, [this](const std::string& n) { return hf(n); }, pixels_.values);
    return c;
  }

  // The session's image features, fed as the host feeds them (siglip_patch_rows, the position
  // table as embed_base) and the first row dropped for "default" (clip_drop_cls). `transposed`
  // feeds the patch rows in column-major grid order, the positions still row-major.
  void run_graph(const frontend::VisionConfig& vc, bool f64, std::vector<float>* out,
                 bool transposed = false) const {
    auto g = frontend::build_clip_vision_graph(vc);
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
    std::vector<float> rows =
        frontend::siglip_patch_rows(pixels_.values, pixels_.shape[1], vc.patch_size);
    if (transposed) rows = transpose_grid(rows, kGrid, 3 * vc.patch_size * vc.patch_size);
    auto base = frontend::clip_embed_base(vc, read);
    QBC_ASSERT_OK(base);
    std::vector<float> got;
    QBC_ASSERT_OK((*session)->forward_inputs({rows, *base}, &got));
    *out = frontend::clip_drop_cls(vc, got, vc.text_hidden);
  }
};

TEST_F(LlavaSiglip, ConfigAndPreprocessingGiveThe27x27ValidGrid) {
  EXPECT_EQ(vc_.tower, frontend::VisionTower::kSiglip);
  EXPECT_EQ(vc_.projector, frontend::VisionProjector::kLlavaMlp);
  EXPECT_EQ(vc_.image_size, 384);
  EXPECT_EQ(vc_.patch_size, 14);
  EXPECT_EQ(vc_.image_size - kGrid * vc_.patch_size, 6);  // the pixels the convolution drops
  EXPECT_EQ(vc_.position_grid, kGrid);
  EXPECT_EQ(vc_.position_embeddings, kPatches);  // no CLS row
  EXPECT_EQ(vc_.feature_layer, -1);
  EXPECT_TRUE(vc_.keeps_cls);  // "full"
  EXPECT_EQ(vc_.hidden_act, "gelu_pytorch_tanh");
  EXPECT_DOUBLE_EQ(vc_.norm_eps, 1e-6);
  EXPECT_EQ(vc_.projector_act, "gelu");
  EXPECT_EQ(vc_.width, 32);
  EXPECT_EQ(vc_.depth, 2);
  EXPECT_EQ(vc_.heads, 2);
  EXPECT_EQ(vc_.ffn, 43);
  EXPECT_EQ(vc_.text_hidden, 64);
  EXPECT_EQ(frontend::llava_tower_rows(vc_), kPatches);
  EXPECT_EQ(vc_.tokens_per_view(), kPatches);
  auto used = frontend::clip_used_layers(vc_);
  QBC_ASSERT_OK(used);
  EXPECT_EQ(*used, 2);  // hidden_states[-1] of 2 layers
  auto g = frontend::build_clip_vision_graph(vc_);
  QBC_ASSERT_OK(g);
  ASSERT_EQ(g->outputs().size(), 1u);
  EXPECT_EQ(g->node(g->outputs()[0]).type.dims, (std::vector<int64_t>{1, kPatches, 64}));
  const ir::ValueId patches = g->find("patches"), base = g->find("embed_base");
  ASSERT_GE(patches, 0);
  ASSERT_GE(base, 0);
  EXPECT_EQ(g->node(patches).type.dims, (std::vector<int64_t>{1, kPatches, 3 * 14 * 14}));
  EXPECT_EQ(g->node(base).type.dims, (std::vector<int64_t>{1, kPatches, 32}));
  EXPECT_LT(g->find("vis.pre_norm"), 0);  // SigLIP has no pre-norm
  // The patch embedding's bias is read; neither post_layernorm nor a CLIP tensor is; every
  // weight is a checkpoint tensor.
  std::set<std::string> names, read;
  for (const auto& t : ckpt_->tensors()) names.insert(t.name);
  for (const auto& [name, w] : g->weights()) {
    read.insert(w.tensor);
    EXPECT_TRUE(names.count(w.tensor)) << w.tensor;
    EXPECT_EQ(w.tensor.find("post_layernorm"), std::string::npos) << w.tensor;
    EXPECT_EQ(w.tensor.find("pre_layrnorm"), std::string::npos) << w.tensor;
  }
  EXPECT_TRUE(read.count("vision_tower.vision_model.embeddings.patch_embedding.bias"));
  EXPECT_TRUE(read.count("vision_tower.vision_model.encoder.layers.1.mlp.fc2.weight"));
  // The host's patch rows do not read the last 6 pixels of either side.
  std::vector<float> edited = pixels_.values;
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < 384; ++y)
      for (int64_t x = 0; x < 384; ++x)
        if (y >= kGrid * 14 || x >= kGrid * 14)
          edited[static_cast<size_t>((c * 384 + y) * 384 + x)] = 7.0f;
  EXPECT_EQ(frontend::siglip_patch_rows(edited, 384, 14),
            frontend::siglip_patch_rows(pixels_.values, 384, 14));
}

TEST_F(LlavaSiglip, FloatSessionMatchesHfFloat64Reference) {
  const std::vector<double> want = reference();
  ASSERT_EQ(want.size(), static_cast<size_t>(kPatches * vc_.text_hidden));
  double scale = 0.0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  EXPECT_GT(scale, 0.1);
  for (const bool f64 : {false, true}) {
    std::vector<float> got;
    run_graph(vc_, f64, &got);
    ASSERT_EQ(got.size(), want.size());
    const double err = rel_error(got, want);
    // The worst feature row, to see whether the error sits at the grid's last column or row.
    double row_err = 0.0;
    int64_t worst = 0;
    for (int64_t r = 0; r < kPatches; ++r) {
      for (int64_t c = 0; c < vc_.text_hidden; ++c) {
        const auto i = static_cast<size_t>(r * vc_.text_hidden + c);
        const double e = std::abs(static_cast<double>(got[i]) - want[i]);
        if (e > row_err) {
          row_err = e;
          worst = r;
        }
      }
    }
    std::printf("[llava_siglip] %s rel_err %.2e (max|feature| %.3f, worst row %lld)\n",
                f64 ? "f64" : "f32", err, scale, static_cast<long long>(worst));
    EXPECT_LE(err, f64 ? 5e-7 : 5e-6) << (f64 ? "float64" : "float32");
  }
}

TEST_F(LlavaSiglip, TransposedPatchesPostLayernormErfGeluOrWrongLayerAreDetected) {
  // The tolerance above cannot pass by accident.
  const std::vector<double> want = reference();
  std::vector<float> got;
  // Patch rows in column-major grid order: each position row meets another patch.
  run_graph(vc_, false, &got, /*transposed=*/true);
  ASSERT_EQ(got.size(), want.size());
  const double transposed = rel_error(got, want);
  EXPECT_GT(transposed, 1e-2);
  // post_layernorm on the features (SiglipVisionModel's last_hidden_state, which LLaVA does not
  // read): the session's right features are far from that reference.
  run_graph(vc_, false, &got);
  ASSERT_EQ(got.size(), want.size());
  Variant post;
  post.post_layernorm = true;
  const double post_err = rel_error(got, reference(post));
  EXPECT_GT(post_err, 1e-2);
  // The erf GELU in the tower is close to the tanh one, but not within four times the float32
  // tolerance; the erf reference agrees with it.
  frontend::VisionConfig erf = vc_;
  erf.hidden_act = "gelu";
  run_graph(erf, false, &got);
  ASSERT_EQ(got.size(), want.size());
  const double erf_err = rel_error(got, want);
  EXPECT_GT(erf_err, 2e-5);
  Variant erf_ref;
  erf_ref.tanh_gelu = false;
  EXPECT_LE(rel_error(got, reference(erf_ref)), 5e-6);
  // hidden_states[-2] (the first layer's output) in place of [-1]; that reference agrees.
  frontend::VisionConfig early = vc_;
  early.feature_layer = -2;
  run_graph(early, false, &got);
  ASSERT_EQ(got.size(), want.size());
  const double layer_err = rel_error(got, want);
  EXPECT_GT(layer_err, 1e-3);
  Variant early_ref;
  early_ref.feature_layer = -2;
  EXPECT_LE(rel_error(got, reference(early_ref)), 5e-6);
  std::printf(
      "[llava_siglip] transposed grid rel_err %.2e, post_layernorm %.2e, erf GELU %.2e, "
      "layer -2 %.2e\n",
      transposed, post_err, erf_err, layer_err);
}

TEST_F(LlavaSiglip, DefaultStrategyDropsTheFirstPatchRow) {
  // HF's `[:, 1:]` drops row 0 whatever the tower: with SigLIP that is the first patch's.
  frontend::VisionConfig dflt = vc_;
  dflt.keeps_cls = false;
  EXPECT_EQ(dflt.tokens_per_view(), kPatches - 1);
  std::vector<float> got;
  run_graph(dflt, false, &got);
  Variant v;
  v.full = false;
  const std::vector<double> want = reference(v);
  ASSERT_EQ(want.size(), static_cast<size_t>((kPatches - 1) * vc_.text_hidden));
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LE(rel_error(got, want), 5e-6);
}

TEST_F(LlavaSiglip, OtherActivationsAreRefused) {
  frontend::VisionConfig relu = vc_;
  relu.hidden_act = "relu";
  auto g = frontend::build_clip_vision_graph(relu);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), Code::kUnimplemented);
  EXPECT_TRUE(testing::contains(g.status().message(), "relu")) << g.status().to_string();
  frontend::VisionConfig proj = vc_;
  proj.projector_act = "silu";
  g = frontend::build_clip_vision_graph(proj);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), Code::kUnimplemented);
  EXPECT_TRUE(testing::contains(g.status().message(), "silu")) << g.status().to_string();
}

TEST_F(LlavaSiglip, RandomCheckpointHoldsEveryTensorUnderLlavaNames) {
  int64_t vision = 0, text = 0;
  std::vector<std::string> names;
  for (const auto& t : ckpt_->tensors()) {
    names.push_back(t.name);
    const bool v =
        t.name.rfind("vision_tower.", 0) == 0 || t.name.rfind("multi_modal_projector.", 0) == 0;
    (v ? vision : text) += t.num_elements();
    if (!v) {
      EXPECT_EQ(t.name.rfind("language_model.", 0), 0u) << t.name;
    }
    if (t.name == "vision_tower.vision_model.embeddings.patch_embedding.weight") {
      EXPECT_EQ(t.shape, (std::vector<int64_t>{32, 3, 14, 14}));
    }
    if (t.name == "vision_tower.vision_model.embeddings.position_embedding.weight") {
      EXPECT_EQ(t.shape, (std::vector<int64_t>{kPatches, 32}));
    }
    if (t.name == "multi_modal_projector.linear_1.weight") {
      EXPECT_EQ(t.shape, (std::vector<int64_t>{64, 32}));  // [text, width]
    }
  }
  EXPECT_EQ(vision, vc_.parameters());
  for (const char* want :
       {"vision_tower.vision_model.embeddings.patch_embedding.bias",
        "vision_tower.vision_model.encoder.layers.1.mlp.fc2.bias",
        "vision_tower.vision_model.post_layernorm.weight", "multi_modal_projector.linear_1.bias",
        "multi_modal_projector.linear_2.weight", "language_model.model.embed_tokens.weight"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  // No CLIP tensors.
  EXPECT_EQ(
      std::find(names.begin(), names.end(), "vision_tower.vision_model.embeddings.class_embedding"),
      names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "vision_tower.vision_model.pre_layrnorm.weight"),
            names.end());
  // The language model reads as Qwen2 from text_config, the tower left to the vision import.
  auto src = frontend::ModelSource::open(dir_);
  QBC_ASSERT_OK(src);
  EXPECT_EQ(src->hparams().family, frontend::ModelFamily::kQwen2);
  EXPECT_EQ(src->hparams().hidden_size, 64);
  EXPECT_TRUE(src->hparams().tie_word_embeddings);
  EXPECT_TRUE(src->unexpected_tensors().empty());
  EXPECT_EQ(text, src->hparams().param_counts().total());
}

TEST(LlavaSiglipLanguageModel, RealConfigReadsQwen2FromTextConfig) {
  auto hp = frontend::load_hparams(assets() / "config.json");
  QBC_ASSERT_OK(hp);
  EXPECT_EQ(hp->family, frontend::ModelFamily::kQwen2);
  EXPECT_EQ(hp->vocab_size, 152000);
  EXPECT_EQ(hp->hidden_size, 1024);
  EXPECT_EQ(hp->intermediate_size, 2816);
  EXPECT_EQ(hp->num_hidden_layers, 24);
  EXPECT_EQ(hp->num_attention_heads, 16);
  EXPECT_EQ(hp->num_key_value_heads, 16);
  EXPECT_EQ(hp->max_position_embeddings, 32768);
  EXPECT_DOUBLE_EQ(hp->rope_theta, 1000000.0);
  EXPECT_DOUBLE_EQ(hp->rms_norm_eps, 1e-6);  // Qwen2Config's default
  EXPECT_TRUE(hp->tie_word_embeddings);
  EXPECT_TRUE(hp->qkv_bias);  // Qwen2's q/k/v projections carry biases, o_proj none
  EXPECT_FALSE(hp->o_bias);
}

}  // namespace
}  // namespace qbc
