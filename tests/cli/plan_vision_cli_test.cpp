// `qbc plan` on vision-language configs (docs/cli.md, docs/multimodal.md): the vision part is
// reported on its own line, marked as an estimate, and in --json; not silently left out.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "test_support.h"

namespace qbc {
namespace {

using testing::contains;
using testing::run_qbc;
using testing::shell_quote;

TEST(PlanVisionCliTest, Gemma3PlansTheTextModelAndReportsTheVisionTower) {
  QBC_REQUIRE_SHARED(dir, "model-configs-new/gemma-3-4b-it");
  const auto r = run_qbc("plan " + shell_quote(dir) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("vision")) << r.out;
  const auto& v = j["vision"];
  EXPECT_TRUE(v["estimate"].get<bool>());
  EXPECT_EQ(v["tower"], "SigLIP");
  EXPECT_EQ(v["layers"], 27);
  EXPECT_EQ(v["tokens_per_image"], 256);  // config.json's mm_tokens_per_image
  EXPECT_EQ(v["image_size"], 896);
  // bfloat16 checkpoint: two bytes a parameter; 8-bit weights: one.
  EXPECT_EQ(v["source_bytes"].get<int64_t>(), 2 * v["weight_bytes"].get<int64_t>());
  EXPECT_TRUE(j["fits"].get<bool>());
}

TEST(PlanVisionCliTest, LlavaPlansItsLlamaLanguageModelAndPrintsTheVisionLine) {
  QBC_REQUIRE_SHARED(dir, "model-configs-new/llava-1.5-7b-hf");
  const auto r = run_qbc("plan " + shell_quote(dir));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "vision (estimate")) << r.out;
  EXPECT_TRUE(contains(r.out, "CLIP ViT 24 layers x 1024")) << r.out;
  EXPECT_TRUE(contains(r.out, "576 tokens per 336x336 image")) << r.out;  // (336 / 14)^2
  // The language model (Vicuna-7B from LlamaConfig's defaults under the sparse text_config)
  // is planned: text_config's 4096 positions.
  EXPECT_TRUE(contains(r.out, "fits in memory")) << r.out;
  EXPECT_TRUE(contains(r.out, "model trained for 4096 positions")) << r.out;
}

TEST(PlanVisionCliTest, TextModelsHaveNoVisionLine) {
  QBC_REQUIRE_SHARED(dir, "model-configs/Qwen2.5-0.5B-Instruct");
  const auto r = run_qbc("plan " + shell_quote(dir));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(contains(r.out, "vision")) << r.out;
}

}  // namespace
}  // namespace qbc
