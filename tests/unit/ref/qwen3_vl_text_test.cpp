// The Qwen3-VL language model (Qwen3's decoder: q/k RMSNorm per head, no q/k/v biases; with
// interleaved M-RoPE, `rope_scaling.mrope_interleaved`) on the float reference session, on a
// small random checkpoint written from the real Qwen3-VL-4B config:
//  - the config is shrunk consistently and the graph records `mrope.interleaved`;
//  - text only, the three position streams are equal and the logits equal those of the same
//    weights built as a plain Qwen3 graph (1-D RoPE);
//  - a prompt with an image span (given features spliced in at the placeholders) against a
//    float64 forward pass written from HF's modeling_qwen3_vl.py (naive_qwen2_vl_text.h with
//    its Qwen3-VL switches), prefill and one decode step; the same graph with sectioned streams
//    (Qwen2-VL's rule) is far from it, so the test sees the interleaving.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "naive_qwen2_vl_text.h"
#include "qbc/frontend/importer.h"
#include "qbc/frontend/model_source.h"
#include "qbc/frontend/random_model.h"
#include "qbc/ir/verifier.h"
#include "qbc/ref/session.h"
#include "qbc/runner/mrope.h"
#include "qwen_vl_text_model.h"
#include "rel_error.h"
#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;

using ref::testing::rel_error;

constexpr int64_t kVocab = 256;

class Qwen3VlText : public ::testing::Test {
 protected:
  void SetUp() override {
    QBC_REQUIRE_SHARED(config, "model-configs-new/Qwen3-VL-4B-Instruct/config.json");
    dir_ = testing::temp_dir() / "qwen3_vl_text_random";
    frontend::RandomModelOptions o;
    o.config_path = config;
    o.output_dir = dir_;
    o.seed = 13;
    o.init_std = 0.15;  // large enough that attention, and so the positions, matter
    o.overrides.num_hidden_layers = 2;
    o.overrides.hidden_size = 64;
    o.overrides.intermediate_size = 96;
    o.overrides.num_attention_heads = 4;
    o.overrides.num_key_value_heads = 2;
    o.overrides.head_dim = 16;  // mrope_section [24, 20, 20] -> [3, 2, 3]
    o.overrides.vocab_size = kVocab;
    o.overrides.vision.depth = 1;  // the tower is written too: keep it tiny
    o.overrides.vision.hidden_size = 16;
    o.overrides.vision.num_heads = 1;
    o.overrides.vision.intermediate_size = 16;
    QBC_ASSERT_OK(frontend::write_random_model(o));
    auto src = frontend::ModelSource::open(dir_);
    QBC_ASSERT_OK(src);
    model_ = std::make_unique<ref::testing::QwenVlTextModel>(std::move(*src));
    const auto cfg = nlohmann::json::parse(model_->source().config_json_text());
    image_token_ = cfg.at("image_token_id").get<int32_t>();
  }

  const frontend::HParams& hp() const { return model_->hp(); }
  std::unique_ptr<ref::Session> session(const frontend::HParams& hp, bool f64) const {
    return model_->session(hp, f64);
  }
  std::vector<float> hf(const std::string& name) const { return model_->hf(name); }
  ref::testing::NaiveQwen2VlDims dims() const {
    ref::testing::NaiveQwen2VlDims d = model_->dims();
    d.qkv_bias = false;
    d.qk_norm = true;
    d.interleaved = true;
    return d;
  }

  fs::path dir_;
  std::unique_ptr<ref::testing::QwenVlTextModel> model_;
  int32_t image_token_ = -1;
};

TEST_F(Qwen3VlText, RandomConfigIsShrunkConsistentlyAndTheGraphRecordsTheInterleaving) {
  EXPECT_EQ(hp().architecture, "Qwen3VLForConditionalGeneration");
  EXPECT_EQ(hp().head_dim, 16);
  EXPECT_TRUE(hp().qk_norm);
  EXPECT_FALSE(hp().qkv_bias);
  EXPECT_TRUE(hp().mrope_interleaved);
  EXPECT_EQ(hp().mrope_section, (std::vector<int64_t>{3, 2, 3}));
  EXPECT_EQ(image_token_, kVocab - 1);
  QBC_ASSERT_OK(model_->source().validate());
  auto g = frontend::build_decoder_graph(hp(), frontend::ImportOptions{64});
  QBC_ASSERT_OK(g);
  EXPECT_EQ(g->metadata.at("mrope.interleaved"), "1");
  const auto spec = runner::mrope_spec_from_metadata(g->metadata);
  QBC_ASSERT_OK(spec);
  EXPECT_TRUE(spec->interleaved);
  EXPECT_EQ(spec->section, (std::array<int64_t, 3>{3, 2, 3}));
}

TEST_F(Qwen3VlText, TextOnlyEqualsOneDimensionalRope) {
  frontend::HParams plain = hp();
  plain.mrope_section.clear();  // the same weights as a Qwen3 graph with the rope op
  plain.mrope_interleaved = false;
  auto vl = session(hp(), false);
  auto q3 = session(plain, false);
  ASSERT_TRUE(vl && q3);
  const std::vector<int32_t> prompt = {3, 17, 92, 41, 200, 7, 66};
  std::vector<float> a, b;
  QBC_ASSERT_OK(vl->forward(prompt, &a));
  QBC_ASSERT_OK(q3->forward(prompt, &b));
  ASSERT_EQ(a.size(), prompt.size() * kVocab);
  EXPECT_EQ(a, b);  // equal streams: every frequency sees the token's position
  for (int32_t t : {5, 250}) {
    QBC_ASSERT_OK(vl->forward({t}, &a));
    QBC_ASSERT_OK(q3->forward({t}, &b));
    EXPECT_EQ(a, b) << "decode token " << t;
  }
}

TEST_F(Qwen3VlText, DeepStackRowsAreAddedAfterTheFirstLayersAsInHf) {
  // The tower of the shrunk config has 1 block, so one tap ([5, 11, 17] of 24 -> [0]): the
  // graph takes deepstack.0 and adds it after decoder layer 0.
  ASSERT_EQ(hp().deepstack_layers, 1);
  const auto cfg = nlohmann::json::parse(model_->source().config_json_text());
  const int32_t vstart = cfg.at("vision_start_token_id").get<int32_t>();
  const int32_t vend = cfg.at("vision_end_token_id").get<int32_t>();
  const int64_t gh = 2, gw = 3;
  std::vector<int32_t> tokens = {5, 80, vstart};
  tokens.insert(tokens.end(), gh * gw, image_token_);
  for (int32_t t : {vend, 40, 41}) tokens.push_back(t);
  const int64_t n = static_cast<int64_t>(tokens.size()), h = hp().hidden_size;
  const std::vector<float> embeds = model_->embeds(tokens, image_token_, 123);
  // The image's DeepStack rows at its tokens, zero elsewhere.
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> rows(static_cast<size_t>(n * h), 0.0f);
  for (int64_t t = 0; t < n; ++t)
    if (tokens[static_cast<size_t>(t)] == image_token_)
      for (int64_t c = 0; c < h; ++c) rows[static_cast<size_t>(t * h + c)] = nd(rng);
  int64_t hf_delta = 0;
  const auto hf_pos =
      ref::testing::hf_get_rope_index(tokens, image_token_, {{1, 2 * gh, 2 * gw}}, 2, &hf_delta);
  const auto pos = runner::mrope_positions(tokens, image_token_, {{1, gh, gw}});
  QBC_ASSERT_OK(pos);
  const auto hfw = [this](const std::string& name) { return hf(name); };
  const std::vector<double> e64(embeds.begin(), embeds.end());
  const std::vector<double> want = ref::testing::naive_qwen2_vl_logits(
      dims(), hfw, e64, hf_pos, {std::vector<double>(rows.begin(), rows.end())});
  for (const bool f64 : {false, true}) {
    auto s = session(hp(), f64);
    ASSERT_TRUE(s);
    std::vector<float> got, plain;
    QBC_ASSERT_OK(s->set_deepstack({rows}));
    QBC_ASSERT_OK(s->forward_embeds_mrope(embeds, n, pos->positions, &got));
    EXPECT_LT(rel_error(got, want), f64 ? 2e-7 : 1e-4) << (f64 ? "float64" : "float32");
    // The rows hold for one call only: the same prompt again without them differs.
    s->reset();
    QBC_ASSERT_OK(s->forward_embeds_mrope(embeds, n, pos->positions, &plain));
    EXPECT_GT(rel_error(plain, want), 1e-3);
  }
  auto s = session(hp(), false);
  EXPECT_EQ(s->set_deepstack({rows, rows}).code(), Code::kInvalidArgument);
}

TEST_F(Qwen3VlText, ImagePromptMatchesHfFloat64Reference) {
  // text, <vision_start>, a 3 x 4 image (grid_thw 1 x 6 x 8 before the 2 x 2 merge), <vision_end>,
  // text; the image rows hold given features instead of embeddings.
  const auto cfg = nlohmann::json::parse(model_->source().config_json_text());
  const int32_t vstart = cfg.at("vision_start_token_id").get<int32_t>();
  const int32_t vend = cfg.at("vision_end_token_id").get<int32_t>();
  const int64_t gh = 3, gw = 4;
  std::vector<int32_t> tokens = {5, 80, 13, vstart};
  tokens.insert(tokens.end(), gh * gw, image_token_);
  for (int32_t t : {vend, 40, 41, 9}) tokens.push_back(t);
  const int64_t n = static_cast<int64_t>(tokens.size()), h = hp().hidden_size;
  const std::vector<float> table = hf("model.embed_tokens.weight");
  const std::vector<float> embeds = model_->embeds(tokens, image_token_, 777);
  // Qwen3-VL places an image's positions as Qwen2-VL does (t 0 for a still image).
  int64_t hf_delta = 0;
  const auto hf_pos =
      ref::testing::hf_get_rope_index(tokens, image_token_, {{1, 2 * gh, 2 * gw}}, 2, &hf_delta);
  const auto pos = runner::mrope_positions(tokens, image_token_, {{1, gh, gw}});
  QBC_ASSERT_OK(pos);
  const auto hfw = [this](const std::string& name) { return hf(name); };
  const std::vector<double> e64(embeds.begin(), embeds.end());
  const std::vector<double> want = ref::testing::naive_qwen2_vl_logits(dims(), hfw, e64, hf_pos);
  const int32_t next = 77;
  std::vector<double> e65 = e64;
  for (int64_t c = 0; c < h; ++c) e65.push_back(table[static_cast<size_t>(next * h + c)]);
  auto hf_pos2 = hf_pos;
  for (auto& s : hf_pos2) s.push_back(n + hf_delta);
  const std::vector<double> want2 = ref::testing::naive_qwen2_vl_logits(dims(), hfw, e65, hf_pos2);
  const std::vector<double> want_last(want2.end() - kVocab, want2.end());
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  ASSERT_GT(scale, 0.05) << "logits too small to be a meaningful check";

  for (const bool f64 : {false, true}) {
    auto s = session(hp(), f64);
    ASSERT_TRUE(s);
    const double tol = f64 ? 2e-7 : 1e-4;
    std::vector<float> got, step;
    QBC_ASSERT_OK(s->forward_embeds_mrope(embeds, n, pos->positions, &got));
    EXPECT_LT(rel_error(got, want), tol) << (f64 ? "float64" : "float32") << " prefill";
    QBC_ASSERT_OK(s->forward({next}, &step));
    EXPECT_LT(rel_error(step, want_last), tol) << (f64 ? "float64" : "float32") << " decode";
    std::printf("%s: prefill %.3g, decode %.3g (max |logit| %.3g)\n", f64 ? "float64" : "float32",
                rel_error(got, want), rel_error(step, want_last), scale);
  }
  // Sectioned streams over the same weights and positions (Qwen2-VL's rule) are far off.
  frontend::HParams sectioned = hp();
  sectioned.mrope_interleaved = false;
  auto s = session(sectioned, true);
  ASSERT_TRUE(s);
  std::vector<float> got;
  QBC_ASSERT_OK(s->forward_embeds_mrope(embeds, n, pos->positions, &got));
  EXPECT_GT(rel_error(got, want), 1e-3) << "the interleaving does not change the logits";
}

}  // namespace
}  // namespace qbc
