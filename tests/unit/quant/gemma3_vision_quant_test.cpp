// Gemma 3's SigLIP tower and soft-embedding projector through the fake-quant evaluator and the
// vision recipe (quant::quantize_vision): a small random tower written from the real
// gemma-3-4b-it config (896x896, 64x64 patches pooled by 4), three shared photographs
// (preprocessed with the real preprocessor_config.json) for calibration and the fourth held
// out, the quantized image features' SQNR against the float reference session, and the
// recipe's bits (per-channel scales where the FFN width, like SigLIP's 4304, is not a multiple
// of the group size).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/frontend/gemma3_vision.h"
#include "qbc/frontend/random_model.h"
#include "qbc/frontend/safetensors.h"
#include "qbc/frontend/vision_config.h"
#include "qbc/image/image.h"
#include "qbc/image/preprocess.h"
#include "qbc/quant/fakequant.h"
#include "qbc/quant/vision_quant.h"
#include "qbc/ref/session.h"
#include "small_vlm.h"
#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;

/// 10·log10(Σ ref² / Σ (ref − x)²), in dB.
double sqnr_db(const std::vector<float>& ref, const std::vector<float>& x) {
  double sig = 0.0, noise = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(ref[i]) - static_cast<double>(x[i]);
    sig += static_cast<double>(ref[i]) * ref[i];
    noise += d * d;
  }
  return 10.0 * std::log10(sig / std::max(noise, 1e-300));
}

class Gemma3VisionQuant : public ::testing::Test {
 protected:
  void SetUp() override {
    QBC_REQUIRE_SHARED(config, "model-configs-new/gemma-3-4b-it/config.json");
    QBC_REQUIRE_SHARED(prep, "model-configs-new/gemma-3-4b-it/preprocessor_config.json");
    QBC_REQUIRE_SHARED(images, "data/images");
    dir_ = testing::temp_dir() / "gemma3_vision_quant_random";
    frontend::RandomModelOptions o;
    o.config_path = config;
    o.output_dir = dir_;
    o.seed = 17;
    o.init_std = 0.1;
    o.overrides.vision.depth = 2;
    o.overrides.vision.hidden_size = 32;
    o.overrides.vision.num_heads = 2;
    o.overrides.vision.intermediate_size = 43;    // like SigLIP's 4304: no group size divides it
    testing::shrink_language_model(o.overrides);  // the projector writes its width
    o.overrides.head_dim = 12;
    QBC_ASSERT_OK(frontend::write_random_model(o));
    auto vc = frontend::load_vision_config(dir_ / "config.json");
    QBC_ASSERT_OK(vc);
    ASSERT_TRUE(vc->has_value());
    vc_ = **vc;
    auto g = frontend::build_gemma3_vision_graph(vc_);
    QBC_ASSERT_OK(g);
    graph_ = std::move(*g);
    auto ck = frontend::SafetensorsCheckpoint::open(dir_);
    QBC_ASSERT_OK(ck);
    ckpt_ = std::make_shared<frontend::SafetensorsCheckpoint>(std::move(*ck));
    std::shared_ptr<frontend::SafetensorsCheckpoint> ckpt = ckpt_;
    const frontend::TensorFloats read = [ckpt](const std::string& n, std::vector<float>* v) {
      return ckpt->read_f32(n, v);
    };
    reader_ = [read](const ir::Weight& w, std::vector<float>* v) {
      return frontend::gemma3_read_vision_weight(read, w, v);
    };
    std::vector<float> base;
    QBC_ASSERT_OK(read("vision_tower.vision_model.embeddings.position_embedding.weight", &base));
    auto spec = image::load_preprocess_spec(prep.string());
    QBC_ASSERT_OK(spec);
    for (const char* name : {"camera.png", "gravel.png", "rocket.jpg", "chelsea.png"}) {
      auto img = image::decode_file((images / name).string());
      QBC_ASSERT_OK(img);
      auto px = image::preprocess(*img, *spec, name);
      QBC_ASSERT_OK(px);
      samples_.push_back(
          {frontend::siglip_patch_rows(px->values, px->shape[1], vc_.patch_size), base});
    }
  }

  std::vector<float> float_features(const quant::FeatureSample& in) const {
    auto s = ref::Session::create(graph_, reader_);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    std::vector<float> out;
    const Status st = (*s)->forward_inputs(in, &out);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return out;
  }

  std::vector<quant::FeatureSample> calibration() const {
    return {samples_[0], samples_[1], samples_[2]};
  }

  fs::path dir_;
  frontend::VisionConfig vc_;
  ir::Graph graph_;
  std::shared_ptr<frontend::SafetensorsCheckpoint> ckpt_;
  ir::WeightReader reader_;
  std::vector<quant::FeatureSample> samples_;  // camera, gravel, rocket, chelsea
};

TEST_F(Gemma3VisionQuant, FakeQuantFloatGraphTracksTheReference) {
  // Unquantized: fp16 values between ops, the float paths of layer_norm, the tanh gelu,
  // full_attention over the 4096 patches, avg_pool and the (1 + w) rms_norm.
  const std::vector<float> want = float_features(samples_[3]);
  auto fq = quant::FakeQuantSession::create(graph_, reader_);
  QBC_ASSERT_OK(fq);
  std::vector<float> got;
  QBC_ASSERT_OK((*fq)->forward_inputs(samples_[3], &got));
  ASSERT_EQ(got.size(), want.size());
  ASSERT_EQ(got.size(), static_cast<size_t>(256 * 24));
  const double db = sqnr_db(want, got);
  std::printf("[gemma3_quant] fake-quant float graph vs float reference: %.2f dB\n", db);
  EXPECT_GT(db, 50.0);
}

TEST_F(Gemma3VisionQuant, QuantizedFeaturesSqnrAboveThreshold) {
  struct Case {
    const char* label;
    config::ActivationScaling scaling;
    int method;
    double min_db;
  };
  const Case cases[] = {
      {"per-token-asymmetric", config::ACTIVATION_SCALING_PER_TOKEN_ASYMMETRIC, 0, 30.0},
      {"static, method 0", config::ACTIVATION_SCALING_STATIC, 0, 30.0},
      // The multimodal preset's method 3 measured 24.9 dB on this tower (CLIP's: 33.6): a finding
      // (docs/multimodal.md "Gemma 3"), held to 20 dB so a regression still fails.
      {"static, method 3", config::ACTIVATION_SCALING_STATIC, 3, 20.0},
  };
  const std::vector<float> want = float_features(samples_[3]);  // chelsea: held out
  for (const Case& c : cases) {
    config::CompileOptions o = config::defaults();
    o.mutable_bit()->set_activation_scaling(c.scaling);
    o.mutable_calibration()->set_method(c.method);
    auto q = quant::quantize_vision(graph_, reader_, calibration(), o);
    QBC_ASSERT_OK(q);
    EXPECT_EQ(q->float_linears, 0) << c.label;
    EXPECT_EQ(q->quantized_linears, 1 + 2 * 6 + 1) << c.label;  // patch, 2 layers x 6, projector
    const ir::WeightReader qr = quant::with_sidecar(reader_, *q);
    auto fq = quant::FakeQuantSession::create(q->graph, qr);
    QBC_ASSERT_OK(fq);
    std::vector<float> got;
    QBC_ASSERT_OK((*fq)->forward_inputs(samples_[3], &got));
    ASSERT_EQ(got.size(), want.size());
    const double db = sqnr_db(want, got);
    std::printf("[gemma3_quant] W8A8 SigLIP, %s, chelsea: SQNR %.2f dB\n", c.label, db);
    EXPECT_GT(db, c.min_db) << c.label;
  }
}

TEST_F(Gemma3VisionQuant, RecipeBitsOnTheGraph) {
  config::CompileOptions o = config::defaults();
  o.mutable_bit()->set_weight_group_size(16);
  auto q = quant::quantize_vision(graph_, reader_, calibration(), o);
  QBC_ASSERT_OK(q);
  const ir::Graph& g = q->graph;
  auto node = [&](const std::string& name) -> const ir::Node& {
    const ir::ValueId id = g.find(name);
    EXPECT_GE(id, 0) << name;
    return g.node(id);
  };
  EXPECT_EQ(node("vis.patch_embed").attrs.get_int("in_bits"), 16);
  EXPECT_EQ(node("image_features").attrs.get_int("in_bits"), 16);
  for (const char* name : {"vis.blk.0.attn.q", "vis.blk.1.mlp.fc2", "vis.blk.1.attn.out"}) {
    EXPECT_EQ(node(name).op, ir::Op::kQLinear) << name;
    EXPECT_EQ(node(name).attrs.get_int("w_bits"), 8) << name;
    EXPECT_EQ(node(name).attrs.get_int("in_bits"), 8) << name;
  }
  // Group 16: fc1 and the projector (in 32) are grouped; fc2 (in 43, as SigLIP's 4304 is a
  // multiple of no group size) and the patch embedding (in 3 x 14 x 14 = 588) get one scale per
  // output channel.
  EXPECT_EQ(node("vis.blk.0.mlp.fc1").attrs.get_int("w_group", 0), 16);
  EXPECT_EQ(node("image_features").attrs.get_int("w_group", 0), 16);
  EXPECT_FALSE(node("vis.blk.1.mlp.fc2").attrs.has("w_group"));
  EXPECT_FALSE(node("vis.patch_embed").attrs.has("w_group"));
  // The tanh GELU and the pool survive quantization.
  EXPECT_EQ(node("vis.blk.0.mlp.act").attrs.get_string("approx"), "tanh");
  EXPECT_EQ(node("vis.proj.pool").op, ir::Op::kAvgPool);
  EXPECT_EQ(node("vis.proj.pool").attrs.get_int("kernel"), 4);
}

}  // namespace
}  // namespace qbc
