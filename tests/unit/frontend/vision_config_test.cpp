// The vision part of VLM config.json files (qbc/frontend/vision_config.h) on the four real
// configs of ../shared/model-configs-new, against the model cards and the published parameter
// counts of the towers.
#include "qbc/frontend/vision_config.h"

#include <gtest/gtest.h>

#include <string>

#include "test_support.h"

namespace qbc::frontend {
namespace {

StatusOr<std::optional<VisionConfig>> load(const std::string& model) {
  return load_vision_config(testing::shared_dir() / "model-configs-new" / model / "config.json");
}

TEST(VisionConfigTest, Qwen25Vl) {
  QBC_REQUIRE_SHARED(dir, "model-configs-new/Qwen2.5-VL-3B-Instruct");
  const auto c = load("Qwen2.5-VL-3B-Instruct");
  QBC_ASSERT_OK(c);
  ASSERT_TRUE(c->has_value());
  const VisionConfig& v = **c;
  EXPECT_EQ(v.tower, VisionTower::kQwen25Vit);
  EXPECT_EQ(v.projector, VisionProjector::kQwenMerger);
  EXPECT_EQ(v.depth, 32);
  EXPECT_EQ(v.width, 1280);
  EXPECT_EQ(v.heads, 16);
  EXPECT_EQ(v.ffn, 3420);
  EXPECT_EQ(v.patch_size, 14);
  EXPECT_EQ(v.merge, 2);
  EXPECT_EQ(v.text_hidden, 2048);
  EXPECT_EQ(v.window_size, 112);
  EXPECT_EQ(v.full_attention_blocks, (std::vector<int64_t>{7, 15, 23, 31}));
  EXPECT_TRUE(v.dynamic_resolution);
  EXPECT_EQ(v.image_token_id, 151655);
  EXPECT_EQ(v.image_start_token_id, 151652);
  EXPECT_EQ(v.image_end_token_id, 151653);
  // 448 / 14 = 32 patches a side, 2 x 2 merged: 16 x 16 = 256 tokens.
  EXPECT_EQ(v.tokens_per_image(), 256);
  // The Qwen2.5-VL technical report gives its ViT as 670M parameters (all three sizes).
  EXPECT_NEAR(static_cast<double>(v.parameters()), 670e6, 0.01 * 670e6);
}

TEST(VisionConfigTest, Qwen3Vl) {
  QBC_REQUIRE_SHARED(dir, "model-configs-new/Qwen3-VL-4B-Instruct");
  const auto c = load("Qwen3-VL-4B-Instruct");
  QBC_ASSERT_OK(c);
  ASSERT_TRUE(c->has_value());
  const VisionConfig& v = **c;
  EXPECT_EQ(v.tower, VisionTower::kQwen3Vit);
  EXPECT_EQ(v.depth, 24);
  EXPECT_EQ(v.width, 1024);
  EXPECT_EQ(v.patch_size, 16);
  EXPECT_EQ(v.text_hidden, 2560);
  EXPECT_EQ(v.position_embeddings, 2304);  // the learned 48 x 48 grid
  EXPECT_EQ(v.deepstack_layers, (std::vector<int64_t>{5, 11, 17}));
  EXPECT_EQ(v.source_dtype, "bfloat16");  // "dtype" in text_config only: the default
  // 448 / 16 = 28 a side, merged 2 x 2: 14 x 14 = 196.
  EXPECT_EQ(v.tokens_per_image(), 196);
  EXPECT_EQ(v.image_token_id, 151655);
}

TEST(VisionConfigTest, Gemma3) {
  QBC_REQUIRE_SHARED(dir, "model-configs-new/gemma-3-4b-it");
  const auto c = load("gemma-3-4b-it");
  QBC_ASSERT_OK(c);
  ASSERT_TRUE(c->has_value());
  const VisionConfig& v = **c;
  EXPECT_EQ(v.tower, VisionTower::kSiglip);
  EXPECT_EQ(v.projector, VisionProjector::kGemmaSoftEmb);
  EXPECT_EQ(v.depth, 27);
  EXPECT_EQ(v.width, 1152);
  EXPECT_EQ(v.ffn, 4304);
  EXPECT_EQ(v.image_size, 896);
  EXPECT_EQ(v.pool, 4);  // 64 x 64 patches pooled to 16 x 16
  EXPECT_EQ(v.text_hidden, 2560);
  EXPECT_EQ(v.tokens_per_image(), 256);
  EXPECT_EQ(v.image_token_id, 262144);
  EXPECT_EQ(v.image_start_token_id, 255999);
  // The Gemma 3 technical report (Table 1): a 417M-parameter vision encoder; the projector
  // adds 1152 x 2560 + 1152 = 2.95M.
  EXPECT_NEAR(static_cast<double>(v.parameters()), 417e6 + 2.95e6, 0.01 * 417e6);
}

TEST(VisionConfigTest, Llava15) {
  QBC_REQUIRE_SHARED(dir, "model-configs-new/llava-1.5-7b-hf");
  const auto c = load("llava-1.5-7b-hf");
  QBC_ASSERT_OK(c);
  ASSERT_TRUE(c->has_value());
  const VisionConfig& v = **c;
  EXPECT_EQ(v.tower, VisionTower::kClip);
  EXPECT_EQ(v.projector, VisionProjector::kLlavaMlp);
  EXPECT_EQ(v.depth, 24);
  EXPECT_EQ(v.image_size, 336);
  EXPECT_EQ(v.feature_layer, -2);
  EXPECT_EQ(v.text_hidden, 4096);        // LlamaConfig's default: text_config has no hidden_size
  EXPECT_EQ(v.tokens_per_image(), 576);  // 24 x 24, CLS dropped ("default")
  EXPECT_EQ(v.image_token_id, 32000);
  EXPECT_EQ(v.source_dtype, "float16");
  // CLIP ViT-L/14-336 is 303.5M parameters (1024 class + 3*14*14*1024 patch + 577*1024
  // positions + 2 LayerNorms of 2*1024 + 24 blocks of 12,596,224); the projector is
  // 1024*4096 + 4096 + 4096*4096 + 4096 = 20,979,712.
  EXPECT_EQ(v.parameters(),
            1024 + 3 * 14 * 14 * 1024 + 577 * 1024 + 4 * 1024 + 24 * int64_t{12596224} + 20979712);
}

TEST(VisionConfigTest, TextModelsHaveNone) {
  const auto c = parse_vision_config(R"({"model_type": "llama", "hidden_size": 64})", "c.json");
  QBC_ASSERT_OK(c);
  EXPECT_FALSE(c->has_value());
}

TEST(VisionConfigTest, OtherFamiliesAndBadValuesAreNamed) {
  const auto other = parse_vision_config(
      R"({"model_type": "paligemma", "vision_config": {"hidden_size": 768}})", "c.json");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), Code::kUnimplemented);
  EXPECT_TRUE(testing::contains(other.status().message(), "paligemma"));
  // Idefics3: a scale factor that does not divide the tile's patch grid (512 / 16 = 32).
  const auto shuffle = parse_vision_config(
      R"({"model_type": "idefics3", "scale_factor": 3,
          "vision_config": {"image_size": 512, "patch_size": 16, "hidden_size": 768,
                            "num_attention_heads": 12}})",
      "c.json");
  ASSERT_FALSE(shuffle.ok());
  EXPECT_EQ(shuffle.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(testing::contains(shuffle.status().message(), "scale_factor"))
      << shuffle.status().message();
  const auto bad = parse_vision_config(
      R"({"model_type": "gemma3", "mm_tokens_per_image": 250,
          "vision_config": {"image_size": 896, "patch_size": 14}})",
      "c.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(testing::contains(bad.status().message(), "mm_tokens_per_image"))
      << bad.status().message();
}

// SmolVLM-256M-Instruct's config (tests/assets/model-configs: sources in its README): SigLIP
// base patch 16 at 512, pixel shuffle by 4 to 64 tokens a tile, 4 x 4 tiles and a global view
// by default (the processor's longest edge 2048). Parameters by hand: 12 blocks of
// 4·768 + 4·(768² + 768) + (768·3072 + 3072) + (3072·768 + 768) = 7,087,872 each, the patch
// convolution 768·768 + 768, 1024 position rows of 768, post_layernorm 2·768, and the
// connector's proj 12288 x 576 without bias: 93,510,912 (the model card's "93M" encoder).
TEST(VisionConfigTest, SmolVlm) {
  const auto c = load_vision_config(testing::source_dir() /
                                    "tests/assets/model-configs/SmolVLM-256M-Instruct/config.json");
  QBC_ASSERT_OK(c);
  ASSERT_TRUE(c->has_value());
  VisionConfig v = **c;
  EXPECT_EQ(v.tower, VisionTower::kSiglip);
  EXPECT_EQ(v.projector, VisionProjector::kPixelShuffle);
  EXPECT_EQ(v.depth, 12);
  EXPECT_EQ(v.width, 768);
  EXPECT_EQ(v.heads, 12);
  EXPECT_EQ(v.ffn, 3072);
  EXPECT_EQ(v.patch_size, 16);
  EXPECT_EQ(v.tile_size, 512);
  EXPECT_EQ(v.tower_size(), 512);
  EXPECT_EQ(v.merge, 4);
  EXPECT_EQ(v.text_hidden, 576);
  EXPECT_EQ(v.image_token_id, 49190);
  EXPECT_EQ(v.image_size, 2048);
  EXPECT_EQ(v.views(), 17);
  EXPECT_EQ(v.tokens_per_view(), 64);
  EXPECT_EQ(v.tokens_per_image(), 17 * 64);
  EXPECT_EQ(v.parameters(), 93510912);
  QBC_ASSERT_OK(set_image_size(v, 1024, "vision.imageSize"));
  EXPECT_EQ(v.views(), 5);
  QBC_ASSERT_OK(set_image_size(v, 512, "vision.imageSize"));
  EXPECT_EQ(v.views(), 1);  // one tile: the image alone, no global view
  EXPECT_EQ(v.tokens_per_image(), 64);
  const Status bad = set_image_size(v, 1000, "vision.imageSize");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.code(), Code::kInvalidArgument);
  EXPECT_TRUE(testing::contains(bad.message(), "tiles of 512 pixels")) << bad.message();
  EXPECT_TRUE(testing::contains(bad.message(), "e.g. 512 or 1024")) << bad.message();
  EXPECT_EQ(v.image_size, 512);
  // HF's processors resize to at most MAX_IMAGE_SIZE = 4096 a side.
  const Status big = set_image_size(v, 4608, "vision.imageSize");
  ASSERT_FALSE(big.ok());
  EXPECT_TRUE(testing::contains(big.message(), "at most 4096")) << big.message();
  QBC_ASSERT_OK(set_image_size(v, 4096, "vision.imageSize"));
  EXPECT_EQ(v.views(), 65);
}

// Qwen2-VL-2B-Instruct's config (tests/assets/model-configs: sources in its README).
TEST(VisionConfigTest, Qwen2Vl) {
  const auto c = load_vision_config(testing::source_dir() /
                                    "tests/assets/model-configs/Qwen2-VL-2B-Instruct/config.json");
  QBC_ASSERT_OK(c);
  ASSERT_TRUE(c->has_value());
  const VisionConfig& v = **c;
  EXPECT_EQ(v.tower, VisionTower::kQwen2Vit);
  EXPECT_EQ(v.depth, 32);
  EXPECT_EQ(v.width, 1280);               // embed_dim
  EXPECT_EQ(v.ffn, 5120);                 // embed_dim x mlp_ratio 4
  EXPECT_EQ(v.text_hidden, 1536);         // vision_config.hidden_size: the merger's output
  EXPECT_EQ(v.hidden_act, "quick_gelu");  // Qwen2VLVisionConfig's default
  EXPECT_EQ(v.tokens_per_image(), 256);
  // The Qwen2-VL report gives its ViT as 675M parameters (with the 7B's 3584-wide merger
  // output; the 2B's 1536 has 3.1M fewer in mlp.2).
  EXPECT_NEAR(static_cast<double>(v.parameters()), 665.3e6, 0.1e6);
  const auto bad = parse_vision_config(
      R"({"model_type": "qwen2_vl", "vision_config": {"hidden_act": "relu"}})", "c.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(testing::contains(bad.status().message(), "hidden_act")) << bad.status().message();
}

// vision.imageSize: a Qwen tower takes multiples of patch x merge, a tower with learned
// positions only its own size.
TEST(VisionConfigTest, ImageSizeIsCheckedPerTower) {
  QBC_REQUIRE_SHARED(dir, "model-configs-new/Qwen2.5-VL-3B-Instruct");
  auto q = load("Qwen2.5-VL-3B-Instruct");
  QBC_ASSERT_OK(q);
  VisionConfig v = **q;
  QBC_ASSERT_OK(set_image_size(v, 0, "vision.imageSize"));
  EXPECT_EQ(v.image_size, 448);
  QBC_ASSERT_OK(set_image_size(v, 336, "vision.imageSize"));
  EXPECT_EQ(v.image_size, 336);
  EXPECT_EQ(v.tokens_per_image(), 144);  // 12 x 12 merged
  for (const int64_t bad : {300, 14, 1}) {
    const Status s = set_image_size(v, bad, "vision.imageSize");
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_TRUE(testing::contains(s.message(), "vision.imageSize " + std::to_string(bad)))
        << s.message();
    EXPECT_TRUE(testing::contains(s.message(), "multiples of patch_size x spatial_merge_size = 28"))
        << s.message();
  }
  EXPECT_TRUE(testing::contains(set_image_size(v, 300, "k").message(), "e.g. 280 or 308"));
  EXPECT_EQ(v.image_size, 336);  // unchanged by the refusals
  auto l = load("llava-1.5-7b-hf");
  QBC_ASSERT_OK(l);
  VisionConfig clip = **l;
  QBC_ASSERT_OK(set_image_size(clip, 336, "vision.imageSize"));  // its own size
  EXPECT_EQ(clip.position_grid, 24);
  // CLIP takes multiples of its patch (positions interpolated): 224 is 16 x 16 patches.
  QBC_ASSERT_OK(set_image_size(clip, 224, "vision.imageSize"));
  EXPECT_EQ(clip.image_size, 224);
  EXPECT_EQ(clip.position_grid, 24);  // the table's grid stays
  EXPECT_EQ(clip.tokens_per_image(), 16 * 16);
  EXPECT_EQ(clip.parameters(), (**l).parameters());  // the same checkpoint
  const Status odd = set_image_size(clip, 230, "vision.imageSize");
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.code(), Code::kInvalidArgument);
  EXPECT_TRUE(
      testing::contains(odd.message(), "multiples of patch_size = 14 pixels (e.g. 224 or 238)"))
      << odd.message();
  // Gemma 3's SigLIP stays at its own size: its projector pools a grid the config fixes.
  auto g = load("gemma-3-4b-it");
  QBC_ASSERT_OK(g);
  VisionConfig siglip = **g;
  const Status s = set_image_size(siglip, 448, "vision.imageSize");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kUnimplemented);
  EXPECT_TRUE(testing::contains(s.message(), "takes 896x896 only")) << s.message();
  EXPECT_TRUE(testing::contains(s.message(), "mm_tokens_per_image")) << s.message();
}

}  // namespace
}  // namespace qbc::frontend
