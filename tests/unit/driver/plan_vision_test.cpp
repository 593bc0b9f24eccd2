// The vision part of `qbc plan` (driver::vision_plan, vision_time): the tower's work counted
// from config.json, checked against the equations of the HF towers written out here for the
// real llava-1.5-7b-hf and Qwen2.5-VL-3B-Instruct configs, and its time at the target's rates.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "qbc/driver/plan.h"
#include "test_support.h"

namespace qbc {
namespace {

TEST(PlanVision, ClipWorkFollowsTheTowerEquations) {
  QBC_REQUIRE_SHARED(config, "model-configs-new/llava-1.5-7b-hf/config.json");
  auto v = driver::vision_plan(config.string());
  QBC_ASSERT_OK(v);
  ASSERT_TRUE(v->present);
  const driver::VisionWork& w = v->work;
  // CLIP ViT-L/14 at 336: 24 x 24 patches and the CLS row; vision_feature_layer -2 runs 23 of
  // the 24 layers; width 1024, MLP 4096; the projector maps 576 rows (CLS dropped) to 4096.
  const int64_t n = 577, d = 1024, f = 4096, t = 4096, layers = 23, tokens = 576;
  EXPECT_EQ(w.rows, n);
  EXPECT_EQ(w.layers, layers);
  EXPECT_EQ(w.tokens, tokens);
  const int64_t per_layer = n * (4 * d * d + 2 * d * f) + 2 * n * n * d;
  EXPECT_EQ(w.macs_i8, layers * per_layer + tokens * d * t);
  EXPECT_EQ(w.macs_i16, n * (3 * 14 * 14) * d + tokens * t * t);  // patches, projector output
  EXPECT_EQ(w.weight_bytes, 3 * 14 * 14 * d + layers * (4 * d * d + 2 * d * f) + d * t + t * t);
}

TEST(PlanVision, QwenWindowLayersSeeTheirWindowOnly) {
  QBC_REQUIRE_SHARED(config, "model-configs-new/Qwen2.5-VL-3B-Instruct/config.json");
  auto v = driver::vision_plan(config.string());
  QBC_ASSERT_OK(v);
  ASSERT_TRUE(v->present);
  const driver::VisionWork& w = v->work;
  // 448 x 448 at patch 14: 32 x 32 rows; windows of 112 px are 8 x 8 = 64 rows; blocks 7, 15,
  // 23 and 31 attend to all 1024 rows. SwiGLU MLP (gate, up, down) of 3420.
  const int64_t n = 1024, d = 1280, f = 3420, t = 2048, m = 4 * d, tokens = 256;
  EXPECT_EQ(w.rows, n);
  EXPECT_EQ(w.layers, 32);
  EXPECT_EQ(w.tokens, tokens);
  const int64_t linears = n * (4 * d * d + 3 * d * f);
  const int64_t attention = 4 * (2 * n * n * d) + 28 * (2 * n * 64 * d);
  EXPECT_EQ(w.macs_i8, 32 * linears + attention + tokens * m * m);
  EXPECT_EQ(w.macs_i16, n * (3 * 2 * 14 * 14) * d + tokens * m * t);
}

// SmolVLM-256M-Instruct (tests/assets/model-configs): one call of the tower per view (16 tiles
// and the global view at the default 2048 x 2048), each SigLIP-B/16 over a 512 tile: 1024 rows,
// 12 layers of width 768 and MLP 3072; the connector maps 64 rows of 16 x 768 to 576.
TEST(PlanVision, SmolVlmCountsEveryTileAndTheGlobalView) {
  const std::string config =
      (testing::source_dir() / "tests/assets/model-configs/SmolVLM-256M-Instruct/config.json")
          .string();
  auto v = driver::vision_plan(config);
  QBC_ASSERT_OK(v);
  ASSERT_TRUE(v->present);
  const driver::VisionWork& w = v->work;
  const int64_t n = 1024, d = 768, f = 3072, t = 576, views = 17, tokens = 64;
  EXPECT_EQ(w.views, views);
  EXPECT_EQ(w.rows, n);
  EXPECT_EQ(w.tokens, views * tokens);
  EXPECT_EQ(v->tokens_per_image, views * tokens);
  const int64_t per_layer = n * (4 * d * d + 2 * d * f) + 2 * n * n * d;
  EXPECT_EQ(w.macs_i8, views * 12 * per_layer);
  EXPECT_EQ(w.macs_i16, views * (n * (3 * 16 * 16) * d + tokens * (16 * d) * t));
  EXPECT_EQ(w.weight_bytes, 3 * 16 * 16 * d + 12 * (4 * d * d + 2 * d * f) + 16 * d * t);
  // At 512 one view: a seventeenth of the work.
  auto one = driver::vision_plan(config, 512);
  QBC_ASSERT_OK(one);
  EXPECT_EQ(one->work.views, 1);
  EXPECT_EQ(one->work.macs_i8 * views, w.macs_i8);
  EXPECT_TRUE(testing::contains(driver::vision_plan_text(*v), "16 tiles and a global view"))
      << driver::vision_plan_text(*v);
}

TEST(PlanVision, TimeScalesWithCoresWhereTheMacsBound) {
  driver::VisionWork w;
  w.macs_i8 = 4'000'000'000'000;  // far more MACs than bytes: MAC-bound on any core count
  w.weight_bytes = 1'000'000;
  npu::CostParams p;
  p.clock_hz = 1e9;
  p.int8_macs_per_cycle = 1000;
  p.int16_macs_per_cycle = 250;
  p.vector_ops_per_cycle = 64;
  p.dram_bytes_per_s = 1e10;
  p.host_s = 1e-4;
  const driver::VisionTime one = driver::vision_time(w, p, 1);
  const driver::VisionTime eight = driver::vision_time(w, p, 8);
  EXPECT_EQ(one.bound, npu::Bound::kMac);
  EXPECT_DOUBLE_EQ(one.mac_s, 4.0);
  EXPECT_DOUBLE_EQ(eight.mac_s, 0.5);
  EXPECT_DOUBLE_EQ(one.dram_s, eight.dram_s);  // the cores share one DRAM
  EXPECT_DOUBLE_EQ(one.seconds, 4.0 + 1e-4);
  // 16-bit activations run at the INT16 rate: the same MACs take 4x as long.
  driver::VisionWork w16;
  w16.macs_i16 = w.macs_i8;
  EXPECT_DOUBLE_EQ(driver::vision_time(w16, p, 1).mac_s, 4 * one.mac_s);
  // Bytes only: DRAM-bound, the same time on every core count.
  driver::VisionWork bytes;
  bytes.weight_bytes = 10'000'000'000;
  EXPECT_EQ(driver::vision_time(bytes, p, 8).bound, npu::Bound::kDram);
  EXPECT_DOUBLE_EQ(driver::vision_time(bytes, p, 8).seconds,
                   driver::vision_time(bytes, p, 1).seconds);
}

TEST(PlanVision, TextModelHasNoVisionWork) {
  QBC_REQUIRE_SHARED(config, "model-configs/Qwen2.5-0.5B-Instruct/config.json");
  auto v = driver::vision_plan(config.string());
  QBC_ASSERT_OK(v);
  EXPECT_FALSE(v->present);
  EXPECT_EQ(v->work.tokens, 0);
  EXPECT_EQ(driver::vision_dram_bytes(*v), 0);
}

}  // namespace
}  // namespace qbc
