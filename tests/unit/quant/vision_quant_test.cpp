// The Qwen2.5-VL vision tower through the fake-quant evaluator and the vision recipe
// (quant::quantize_vision): a small random tower written from the real 3B config, random pixel
// rows for calibration and evaluation, the quantized features' SQNR against the float
// reference session, the recipe's bits on the graph, and the float path left as it was.
#include "qbc/quant/vision_quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/frontend/qwen_vision.h"
#include "qbc/frontend/random_model.h"
#include "qbc/frontend/safetensors.h"
#include "qbc/frontend/vision_config.h"
#include "qbc/ir/op_params.h"
#include "qbc/ir/verifier.h"
#include "qbc/quant/fakequant.h"
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

class VisionQuant : public ::testing::Test {
 protected:
  void SetUp() override {
    QBC_REQUIRE_SHARED(config, "model-configs-new/Qwen2.5-VL-3B-Instruct/config.json");
    dir_ = testing::temp_dir() / "vision_quant_random";
    frontend::RandomModelOptions o;
    o.config_path = config;
    o.output_dir = dir_;
    o.seed = 11;
    o.init_std = 0.1;
    o.overrides.vision.depth = 3;
    o.overrides.vision.hidden_size = 32;
    o.overrides.vision.num_heads = 2;           // head_dim 16
    o.overrides.vision.intermediate_size = 48;  // not a multiple of the group size 32
    o.overrides.vision.out_hidden_size = 24;
    o.overrides.vision.fullatt_block_indexes = std::vector<int64_t>{1};  // 0, 2: windows
    // The language model is written too: keep it tiny (its width is the tower's out width). At
    // the real 3B shape every test's SetUp spent about 100 s writing it.
    testing::shrink_language_model(o.overrides);  // the projector writes its width
    QBC_ASSERT_OK(frontend::write_random_model(o));
    auto vc = frontend::load_vision_config(dir_ / "config.json");
    QBC_ASSERT_OK(vc);
    ASSERT_TRUE(vc->has_value());
    vc_ = **vc;
    // 224 x 336 pixels: 16 x 24 patches, 2 x 3 windows of 8 x 8 patches.
    auto layout = frontend::qwen_vision_layout(vc_, {1, 16, 24});
    QBC_ASSERT_OK(layout);
    layout_ = std::move(*layout);
    ASSERT_EQ(layout_.window_tokens.size(), 6u);
    auto g = frontend::build_qwen_vision_graph(vc_, layout_);
    QBC_ASSERT_OK(g);
    graph_ = std::move(*g);
    auto ck = frontend::SafetensorsCheckpoint::open(dir_);
    QBC_ASSERT_OK(ck);
    ckpt_ = std::make_shared<frontend::SafetensorsCheckpoint>(std::move(*ck));
    std::shared_ptr<frontend::SafetensorsCheckpoint> ckpt = ckpt_;
    reader_ = [ckpt](const ir::Weight& w, std::vector<float>* v) {
      return ckpt->read_f32(w.tensor, v);
    };
  }

  /// Graph inputs for a random image (testing::qwen_random_image).
  quant::FeatureSample sample(uint32_t seed) const {
    return testing::qwen_random_image(vc_, layout_, seed);
  }

  std::vector<float> float_features(const ir::Graph& g, const quant::FeatureSample& in) const {
    auto s = ref::Session::create(g, reader_);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    std::vector<float> out;
    const Status st = (*s)->forward_inputs(in, &out);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return out;
  }

  std::vector<quant::FeatureSample> calibration() const {
    return {sample(1), sample(2), sample(3), sample(4)};
  }

  fs::path dir_;
  frontend::VisionConfig vc_;
  frontend::QwenVisionLayout layout_;
  ir::Graph graph_;
  std::shared_ptr<frontend::SafetensorsCheckpoint> ckpt_;
  ir::WeightReader reader_;
};

TEST_F(VisionQuant, FakeQuantFloatGraphTracksTheReference) {
  // Unquantized graph: fp16 values between ops, the float paths of gelu, rope_table,
  // full_attention (both kinds of block) and merge_rows.
  const quant::FeatureSample in = sample(100);
  const std::vector<float> want = float_features(graph_, in);
  auto fq = quant::FakeQuantSession::create(graph_, reader_);
  QBC_ASSERT_OK(fq);
  std::vector<float> got;
  QBC_ASSERT_OK((*fq)->forward_inputs(in, &got));
  ASSERT_EQ(got.size(), want.size());
  ASSERT_EQ(got.size(), static_cast<size_t>(384 / 4 * 24));
  const double db = sqnr_db(want, got);
  std::printf("fake-quant float graph vs float reference: %.2f dB\n", db);
  EXPECT_GT(db, 50.0);
}

TEST_F(VisionQuant, QuantizedFeaturesSqnrAboveThreshold) {
  // The defaults (per-token asymmetric input scales), and the vendor's static scales with
  // calibration.method 0 (symmetric) and 3 (the multimodal preset's: calibrated zero points).
  struct Case {
    const char* label;
    config::ActivationScaling scaling;
    int method;
    bool dynamic, asym;
  };
  const Case cases[] = {
      {"per-token-asymmetric", config::ACTIVATION_SCALING_PER_TOKEN_ASYMMETRIC, 0, true, true},
      {"static, method 0", config::ACTIVATION_SCALING_STATIC, 0, false, false},
      {"static, method 3", config::ACTIVATION_SCALING_STATIC, 3, false, true},
  };
  for (const Case& c : cases) {
    config::CompileOptions o = config::defaults();
    o.mutable_bit()->set_activation_scaling(c.scaling);
    o.mutable_calibration()->set_method(c.method);
    auto q = quant::quantize_vision(graph_, reader_, calibration(), o);
    QBC_ASSERT_OK(q);
    const ir::Node& qkv = q->graph.node(q->graph.find("vis.blk.0.attn.qkv"));
    EXPECT_EQ(qkv.attrs.get_int("in_dynamic", 0), c.dynamic ? 1 : 0) << c.label;
    EXPECT_EQ(qkv.attrs.get_int("in_asym", 0), c.asym ? 1 : 0) << c.label;
    const ir::WeightReader qr = quant::with_sidecar(reader_, *q);
    auto fq = quant::FakeQuantSession::create(q->graph, qr);
    QBC_ASSERT_OK(fq);
    for (uint32_t seed : {100u, 101u}) {  // images not in the calibration set
      const quant::FeatureSample in = sample(seed);
      const std::vector<float> want = float_features(graph_, in);
      std::vector<float> got;
      QBC_ASSERT_OK((*fq)->forward_inputs(in, &got));
      ASSERT_EQ(got.size(), want.size());
      const double db = sqnr_db(want, got);
      std::printf("W8A8 vision, %s, image %u: SQNR %.2f dB\n", c.label, seed, db);
      EXPECT_GT(db, 30.0) << c.label << " seed " << seed;
    }
  }
}

TEST_F(VisionQuant, RecipeBitsOnTheGraph) {
  config::CompileOptions o = config::defaults();
  o.mutable_bit()->set_weight_group_size(32);
  o.mutable_bit()->mutable_transformer()->mutable_weight()->set_ffn(4);  // the recipe says 8
  o.mutable_bit()->mutable_decode()->set_weight(4);  // the language model's phases, not the tower's
  auto q = quant::quantize_vision(graph_, reader_, calibration(), o);
  QBC_ASSERT_OK(q);
  const ir::Graph& g = q->graph;
  EXPECT_EQ(q->second_images, 0);
  for (const ir::Node& n : g.nodes()) EXPECT_FALSE(n.attrs.has("phase_image")) << n.name;
  auto node = [&](const std::string& name) -> const ir::Node& {
    const ir::ValueId id = g.find(name);
    EXPECT_GE(id, 0) << name;
    return g.node(id);
  };
  EXPECT_EQ(q->float_linears, 0);
  EXPECT_EQ(q->quantized_linears, 1 + 3 * 5 + 2);
  EXPECT_EQ(node("vis.patch_embed").attrs.get_int("in_bits"), 16);
  EXPECT_EQ(node("image_features").attrs.get_int("in_bits"), 16);
  EXPECT_EQ(node("image_features").attrs.get_int("out_fp16"), 0);
  EXPECT_EQ(node("vis.merger.fc1").attrs.get_int("in_bits"), 8);
  for (const char* name :
       {"vis.blk.0.attn.qkv", "vis.blk.2.mlp.down_proj", "vis.blk.1.attn.proj"}) {
    EXPECT_EQ(node(name).op, ir::Op::kQLinear) << name;
    EXPECT_EQ(node(name).attrs.get_int("in_bits"), 8) << name;
    EXPECT_EQ(node(name).attrs.get_int("w_bits"), 8) << name;
  }
  // Group 32: fc1 (in 128) is grouped; down_proj (in 48) and the patch embedding (in 1176)
  // are not multiples of 32 and get per-channel scales.
  EXPECT_EQ(node("vis.merger.fc1").attrs.get_int("w_group", 0), 32);
  EXPECT_FALSE(node("vis.blk.0.mlp.down_proj").attrs.has("w_group"));
  EXPECT_FALSE(node("vis.patch_embed").attrs.has("w_group"));
  // Without the vision rule the language path keeps a shorter last group.
  auto stats_free = quant::quantize_rtn(graph_, quant::CalibStats(), ir::WeightReader(), o);
  QBC_ASSERT_OK(stats_free);
  const ir::Graph& plain = stats_free->graph;
  EXPECT_EQ(plain.node(plain.find("vis.blk.0.mlp.down_proj")).attrs.get_int("w_group", 0), 32);
  for (int b = 0; b < 3; ++b) {
    const ir::Node& a = node("vis.blk." + std::to_string(b) + ".attn.attention");
    auto p = ir::full_attention_params(a);
    QBC_ASSERT_OK(p);
    EXPECT_TRUE(p->attention.quantized);
    EXPECT_EQ(p->attention.k_bits, 8);
    EXPECT_EQ(p->attention.p_bits, 8);
    EXPECT_EQ(p->segments.size(), b == 1 ? 0u : 6u);
  }
}

TEST_F(VisionQuant, FloatPathUnchanged) {
  const quant::FeatureSample in = sample(100);
  const std::vector<float> before = float_features(graph_, in);
  const ir::Graph copy = graph_;
  auto q = quant::quantize_vision(graph_, reader_, calibration(), config::defaults());
  QBC_ASSERT_OK(q);
  EXPECT_EQ(graph_.nodes().size(), copy.nodes().size());
  for (size_t i = 0; i < copy.nodes().size(); ++i) {
    EXPECT_EQ(graph_.nodes()[i].op, copy.nodes()[i].op);
    EXPECT_TRUE(graph_.nodes()[i].attrs == copy.nodes()[i].attrs) << graph_.nodes()[i].name;
  }
  const std::vector<float> after = float_features(graph_, in);
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) ASSERT_EQ(before[i], after[i]) << i;
}

TEST_F(VisionQuant, ForwardInputsChecksItsInputs) {
  auto fq = quant::FakeQuantSession::create(graph_, reader_);
  QBC_ASSERT_OK(fq);
  quant::FeatureSample in = sample(5);
  std::vector<float> out;
  in.pop_back();
  EXPECT_EQ((*fq)->forward_inputs(in, &out).code(), Code::kInvalidArgument);
  in = sample(5);
  in[1].resize(in[1].size() - 8);  // one row short
  const Status s = (*fq)->forward_inputs(in, &out);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("rope_cos"), std::string::npos) << s.to_string();
  std::vector<float> logits;
  EXPECT_EQ((*fq)->forward_embeds(std::vector<float>(1176, 0.0f), 1, &logits).code(),
            Code::kFailedPrecondition);
}

TEST_F(VisionQuant, VerifierRefusesBrokenAttentionQuantization) {
  auto q = quant::quantize_vision(graph_, reader_, calibration(), config::defaults());
  QBC_ASSERT_OK(q);
  QBC_ASSERT_OK(ir::verify(q->graph));
  const std::string name = "vis.blk.0.attn.attention";
  auto broken = [&](const std::function<void(ir::Attrs&)>& edit) {
    ir::Graph g = q->graph;
    edit(g.mutable_node(g.find(name)).attrs);
    return ir::verify(g);
  };
  const Status missing = broken([](ir::Attrs& a) {
    ir::Attrs keep;
    for (const auto& [k, v] : a.all()) {
      if (k != "v_scale") keep.set(k, v);
    }
    a = keep;
  });
  EXPECT_EQ(missing.code(), Code::kInvalidArgument);
  EXPECT_NE(missing.message().find(name), std::string::npos) << missing.to_string();
  EXPECT_NE(missing.message().find("v_scale"), std::string::npos) << missing.to_string();
  const Status short_q = broken([](ir::Attrs& a) { a.set("q_scale", std::vector<double>{1.0}); });
  EXPECT_NE(short_q.message().find("q_scale"), std::string::npos) << short_q.to_string();
  const Status bits = broken([](ir::Attrs& a) { a.set("p_bits", int64_t{4}); });
  EXPECT_NE(bits.message().find("p_bits"), std::string::npos) << bits.to_string();
}

}  // namespace
}  // namespace qbc
