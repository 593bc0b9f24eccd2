// The Qwen2.5-VL language model (frontend::build_decoder_graph with M-RoPE: rope_table over the
// host's rope_cos / rope_sin) on the float reference session, on a small random checkpoint
// written from the real Qwen2.5-VL-3B config:
//  - text only, the three position streams are equal and the logits equal those of the same
//    weights built as a plain Qwen2 graph (1-D RoPE);
//  - a prompt with an image span (given features spliced in at the placeholders) against a
//    float64 forward pass written from HF's modeling code (naive_qwen2_vl_text.h), prefill and
//    one decode step after it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
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

class Qwen2VlText : public ::testing::Test {
 protected:
  void SetUp() override {
    QBC_REQUIRE_SHARED(config, "model-configs-new/Qwen2.5-VL-3B-Instruct/config.json");
    dir_ = testing::temp_dir() / "qwen2_vl_text_random";
    frontend::RandomModelOptions o;
    o.config_path = config;
    o.output_dir = dir_;
    o.seed = 11;
    o.init_std = 0.15;  // large enough that attention, and so the positions, matter
    o.overrides.num_hidden_layers = 2;
    o.overrides.hidden_size = 64;
    o.overrides.intermediate_size = 96;
    o.overrides.num_attention_heads = 4;  // head_dim 16: mrope_section [16,24,24] -> [2,3,3]
    o.overrides.num_key_value_heads = 2;
    o.overrides.vocab_size = 256;  // image_token_id 151655 -> 255
    o.overrides.vision.depth = 1;
    o.overrides.vision.hidden_size = 16;
    o.overrides.vision.num_heads = 1;
    o.overrides.vision.intermediate_size = 16;
    o.overrides.vision.out_hidden_size = 64;
    o.overrides.vision.fullatt_block_indexes = std::vector<int64_t>{0};
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
    return d;
  }

  fs::path dir_;
  std::unique_ptr<ref::testing::QwenVlTextModel> model_;
  int32_t image_token_ = -1;
};

TEST_F(Qwen2VlText, RandomVlmConfigIsShrunkConsistently) {
  EXPECT_EQ(hp().architecture, "Qwen2_5_VLForConditionalGeneration");
  EXPECT_EQ(hp().head_dim, 16);
  EXPECT_EQ(hp().mrope_section, (std::vector<int64_t>{2, 3, 3}));
  EXPECT_EQ(image_token_, 255);
  const auto cfg = nlohmann::json::parse(model_->source().config_json_text());
  EXPECT_EQ(cfg.at("video_token_id"), 254);
  EXPECT_EQ(cfg.at("vision_start_token_id"), 253);
  EXPECT_EQ(cfg.at("vision_end_token_id"), 252);
  QBC_ASSERT_OK(model_->source().validate());
  EXPECT_TRUE(
      model_->source().unexpected_tensors().empty());  // visual.* belong to the vision graph
  EXPECT_TRUE(model_->source().has_tensor("visual.merger.mlp.2.weight"));
}

TEST_F(Qwen2VlText, TextOnlyEqualsOneDimensionalRope) {
  frontend::HParams plain = hp();
  plain.mrope_section.clear();  // the same weights as a Qwen2 graph with the rope op
  auto vl = session(hp(), false);
  auto q2 = session(plain, false);
  ASSERT_TRUE(vl && q2);
  const std::vector<int32_t> prompt = {3, 17, 92, 41, 200, 7, 66};
  std::vector<float> a, b;
  QBC_ASSERT_OK(vl->forward(prompt, &a));
  QBC_ASSERT_OK(q2->forward(prompt, &b));
  ASSERT_EQ(a.size(), prompt.size() * 256);
  EXPECT_EQ(a, b);  // identical tables (float64 angles, one rounding) and the same kernel
  for (int32_t t : {5, 250}) {  // decode steps
    QBC_ASSERT_OK(vl->forward({t}, &a));
    QBC_ASSERT_OK(q2->forward({t}, &b));
    EXPECT_EQ(a, b) << "decode token " << t;
  }
  // Explicit equal streams through forward_embeds_mrope give the same as text positions.
  vl->reset();
  std::vector<float> e, c;
  QBC_ASSERT_OK(vl->embed(prompt, &e));
  QBC_ASSERT_OK(vl->forward_embeds_mrope(e, 7, runner::mrope_text_positions(0, 7, 0), &c));
  q2->reset();
  QBC_ASSERT_OK(q2->forward(prompt, &b));
  EXPECT_EQ(c, b);
  // A graph without M-RoPE refuses explicit positions.
  EXPECT_EQ(q2->forward_embeds_mrope(e, 7, runner::mrope_text_positions(0, 7, 0), &c).code(),
            Code::kFailedPrecondition);
}

TEST_F(Qwen2VlText, ImagePromptMatchesHfFloat64Reference) {
  // text, <vision_start>, a 3 x 4 image (grid_thw 1 x 6 x 8 before the 2 x 2 merge), <vision_end>,
  // text; the image rows hold given features instead of embeddings.
  const int64_t gh = 3, gw = 4;
  std::vector<int32_t> tokens = {5, 80, 13, 253};  // 253: vision_start_token_id after the shrink
  tokens.insert(tokens.end(), gh * gw, image_token_);
  for (int32_t t : {252, 40, 41, 9}) tokens.push_back(t);  // 252: vision_end_token_id
  const int64_t n = static_cast<int64_t>(tokens.size()), h = hp().hidden_size;
  const std::vector<float> table = hf("model.embed_tokens.weight");
  const std::vector<float> embeds = model_->embeds(tokens, image_token_, 12345);
  int64_t hf_delta = 0;
  const auto hf_pos =
      ref::testing::hf_get_rope_index(tokens, image_token_, {{1, 2 * gh, 2 * gw}}, 2, &hf_delta);
  const auto pos = runner::mrope_positions(tokens, image_token_, {{1, gh, gw}});
  QBC_ASSERT_OK(pos);
  std::vector<int64_t> hf_flat;
  for (const auto& s : hf_pos) hf_flat.insert(hf_flat.end(), s.begin(), s.end());
  ASSERT_EQ(pos->positions, hf_flat);
  ASSERT_EQ(pos->delta, hf_delta);
  ASSERT_EQ(hf_delta,
            std::max(gh, gw) - gh * gw);  // the image spans max(gh, gw) = 4 positions, not 12

  const auto hfw = [this](const std::string& name) { return hf(name); };
  const std::vector<double> e64(embeds.begin(), embeds.end());
  const std::vector<double> want = ref::testing::naive_qwen2_vl_logits(dims(), hfw, e64, hf_pos);
  // One decode step after the prompt: HF's position is cache_position + rope_deltas everywhere.
  const int32_t next = 77;
  std::vector<double> e65 = e64;
  for (int64_t c = 0; c < h; ++c) e65.push_back(table[static_cast<size_t>(next * h + c)]);
  auto hf_pos2 = hf_pos;
  for (auto& s : hf_pos2) s.push_back(n + hf_delta);
  const std::vector<double> want2 = ref::testing::naive_qwen2_vl_logits(dims(), hfw, e65, hf_pos2);
  const std::vector<double> want_last(want2.end() - 256, want2.end());
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::abs(v));
  ASSERT_GT(scale, 0.05) << "logits too small to be a meaningful check";

  for (const bool f64 : {false, true}) {
    auto s = session(hp(), f64);
    ASSERT_TRUE(s);
    // float64: the logits come back as float32, so within their rounding (2^-23 relative).
    const double tol = f64 ? 2e-7 : 1e-4;
    std::vector<float> got, step;
    QBC_ASSERT_OK(s->forward_embeds_mrope(embeds, n, pos->positions, &got));
    EXPECT_LT(rel_error(got, want), tol) << (f64 ? "float64" : "float32") << " prefill";
    QBC_ASSERT_OK(s->forward({next}, &step));
    EXPECT_LT(rel_error(step, want_last), tol) << (f64 ? "float64" : "float32") << " decode";
    std::printf("%s: prefill %.3g, decode %.3g (max |logit| %.3g)\n", f64 ? "float64" : "float32",
                rel_error(got, want), rel_error(step, want_last), scale);
    // The same embeddings at text positions (1-D RoPE) are far off: the test sees M-RoPE.
    s->reset();
    QBC_ASSERT_OK(s->forward_embeds(embeds, n, &got));
    EXPECT_GT(rel_error(got, want), 1e-3) << "image positions do not change the logits";
  }
}

}  // namespace
}  // namespace qbc
