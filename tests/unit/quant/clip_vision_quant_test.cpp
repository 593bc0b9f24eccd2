// LLaVA-1.5's CLIP vision tower through the fake-quant evaluator and the vision recipe
// (quant::quantize_vision): a small random tower written from the real llava-1.5-7b-hf config,
// three shared photographs (preprocessed with the real preprocessor_config.json) for
// calibration and the fourth held out, the quantized image features' SQNR against the float
// reference session, and the recipe's bits on the graph.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/frontend/clip_vision.h"
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

class ClipVisionQuant : public ::testing::Test {
 protected:
  void SetUp() override {
    QBC_REQUIRE_SHARED(config, "model-configs-new/llava-1.5-7b-hf/config.json");
    QBC_REQUIRE_SHARED(prep, "model-configs-new/llava-1.5-7b-hf/preprocessor_config.json");
    QBC_REQUIRE_SHARED(images, "data/images");
    dir_ = testing::temp_dir() / "clip_vision_quant_random";
    frontend::RandomModelOptions o;
    o.config_path = config;
    o.output_dir = dir_;
    o.seed = 13;
    o.init_std = 0.1;
    o.overrides.vision.depth = 3;
    o.overrides.vision.hidden_size = 32;
    o.overrides.vision.num_heads = 2;
    o.overrides.vision.intermediate_size = 48;    // not a multiple of the group size 32
    testing::shrink_language_model(o.overrides);  // the projector writes its width
    QBC_ASSERT_OK(frontend::write_random_model(o));
    auto vc = frontend::load_vision_config(dir_ / "config.json");
    QBC_ASSERT_OK(vc);
    ASSERT_TRUE(vc->has_value());
    vc_ = **vc;
    auto g = frontend::build_clip_vision_graph(vc_);
    QBC_ASSERT_OK(g);
    graph_ = std::move(*g);
    auto ck = frontend::SafetensorsCheckpoint::open(dir_);
    QBC_ASSERT_OK(ck);
    ckpt_ = std::make_shared<frontend::SafetensorsCheckpoint>(std::move(*ck));
    std::shared_ptr<frontend::SafetensorsCheckpoint> ckpt = ckpt_;
    reader_ = [ckpt](const ir::Weight& w, std::vector<float>* v) {
      return ckpt->read_f32(w.tensor, v);
    };
    auto base = frontend::clip_embed_base(
        vc_, [ckpt](const std::string& n, std::vector<float>* v) { return ckpt->read_f32(n, v); });
    QBC_ASSERT_OK(base);
    auto spec = image::load_preprocess_spec(prep.string());
    QBC_ASSERT_OK(spec);
    for (const char* name : {"camera.png", "gravel.png", "rocket.jpg", "chelsea.png"}) {
      auto img = image::decode_file((images / name).string());
      QBC_ASSERT_OK(img);
      auto px = image::preprocess(*img, *spec, name);
      QBC_ASSERT_OK(px);
      samples_.push_back(
          {frontend::clip_patch_rows(px->values, px->shape[1], vc_.patch_size), *base});
    }
  }

  std::vector<float> float_features(const quant::FeatureSample& in) const {
    auto s = ref::Session::create(graph_, reader_);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    std::vector<float> out;
    const Status st = (*s)->forward_inputs(in, &out);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return frontend::clip_drop_cls(vc_, out, vc_.text_hidden);
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

TEST_F(ClipVisionQuant, FakeQuantFloatGraphTracksTheReference) {
  // Unquantized: fp16 values between ops, the float paths of layer_norm, quick_gelu, gelu and
  // full_attention without segments.
  const std::vector<float> want = float_features(samples_[3]);
  auto fq = quant::FakeQuantSession::create(graph_, reader_);
  QBC_ASSERT_OK(fq);
  std::vector<float> got;
  QBC_ASSERT_OK((*fq)->forward_inputs(samples_[3], &got));
  got = frontend::clip_drop_cls(vc_, got, vc_.text_hidden);
  ASSERT_EQ(got.size(), want.size());
  ASSERT_EQ(got.size(), static_cast<size_t>(576 * 24));
  const double db = sqnr_db(want, got);
  std::printf("[clip_quant] fake-quant float graph vs float reference: %.2f dB\n", db);
  EXPECT_GT(db, 50.0);
}

TEST_F(ClipVisionQuant, QuantizedFeaturesSqnrAboveThreshold) {
  struct Case {
    const char* label;
    config::ActivationScaling scaling;
    int method;
  };
  const Case cases[] = {
      {"per-token-asymmetric", config::ACTIVATION_SCALING_PER_TOKEN_ASYMMETRIC, 0},
      {"static, method 0", config::ACTIVATION_SCALING_STATIC, 0},
      {"static, method 3", config::ACTIVATION_SCALING_STATIC, 3},
  };
  const std::vector<float> want = float_features(samples_[3]);  // chelsea: held out
  for (const Case& c : cases) {
    config::CompileOptions o = config::defaults();
    o.mutable_bit()->set_activation_scaling(c.scaling);
    o.mutable_calibration()->set_method(c.method);
    auto q = quant::quantize_vision(graph_, reader_, calibration(), o);
    QBC_ASSERT_OK(q);
    EXPECT_EQ(q->float_linears, 0) << c.label;
    EXPECT_EQ(q->quantized_linears, 1 + 2 * 6 + 2) << c.label;  // patch, 2 layers x 6, projector
    const ir::WeightReader qr = quant::with_sidecar(reader_, *q);
    auto fq = quant::FakeQuantSession::create(q->graph, qr);
    QBC_ASSERT_OK(fq);
    std::vector<float> got;
    QBC_ASSERT_OK((*fq)->forward_inputs(samples_[3], &got));
    got = frontend::clip_drop_cls(vc_, got, vc_.text_hidden);
    ASSERT_EQ(got.size(), want.size());
    const double db = sqnr_db(want, got);
    std::printf("[clip_quant] W8A8 CLIP, %s, chelsea: SQNR %.2f dB\n", c.label, db);
    EXPECT_GT(db, 30.0) << c.label;
  }
}

TEST_F(ClipVisionQuant, RecipeBitsOnTheGraph) {
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
  EXPECT_EQ(node("vis.proj.fc1").attrs.get_int("in_bits"), 8);
  for (const char* name : {"vis.blk.0.attn.q", "vis.blk.1.mlp.fc2", "vis.blk.1.attn.out"}) {
    EXPECT_EQ(node(name).op, ir::Op::kQLinear) << name;
    EXPECT_EQ(node(name).attrs.get_int("w_bits"), 8) << name;
  }
  // Group 16: fc1 (in 32) and fc2 (in 48) are grouped; the projector's last linear (in 24) and
  // the patch embedding (in 3 x 14 x 14 = 588) are not multiples of 16: per-channel scales.
  EXPECT_EQ(node("vis.blk.0.mlp.fc1").attrs.get_int("w_group", 0), 16);
  EXPECT_EQ(node("vis.blk.1.mlp.fc2").attrs.get_int("w_group", 0), 16);
  EXPECT_FALSE(node("image_features").attrs.has("w_group"));
  EXPECT_FALSE(node("vis.patch_embed").attrs.has("w_group"));
  // quick_gelu survives quantization as an attribute of the gelu node.
  EXPECT_EQ(node("vis.blk.0.mlp.act").attrs.get_string("approx"), "quick");
  EXPECT_FALSE(node("vis.proj.gelu").attrs.has("approx"));
}

}  // namespace
}  // namespace qbc
