// HF-style preprocessing (qbc/image/preprocess.h): preprocessor_config.json parsing, the
// resize rules (smart_resize, shortest edge + centre crop, fixed), rescale/normalize and
// Qwen2-VL's patch order, with expected values worked out by hand from transformers' code;
// and the four shared photographs through the four real configs.
#include "qbc/image/preprocess.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "test_support.h"

namespace qbc::image {
namespace {

struct SmartCase {
  int64_t h, w, factor, min_pixels, max_pixels;
  int32_t want_h, want_w;
};

// round(300/28 = 10.71) = 11 -> 308, round(451/28 = 16.11) = 16 -> 448.
// 70/28 = 2.5 rounds to even: 2 -> 56 (Python's round), not 84.
// 42/28 = 1.5 rounds to even: 2 -> 56.
// 1000 x 500 over max 200704: beta = sqrt(500000 / 200704) = 1.57836; floor(1000 / beta / 28
// = 22.63) = 22 -> 616, floor(11.31) = 11 -> 308.
// 10 x 20 under min 3136: rounds to 0 x 28; beta = sqrt(3136 / 200) = 3.9598; ceil(1.414) = 2
// -> 56, ceil(2.828) = 3 -> 84.
// Qwen3-VL (factor 32): 300/32 = 9.375 -> 288, 451/32 = 14.09 -> 448.
const SmartCase kSmart[] = {
    {300, 451, 28, 3136, 12845056, 308, 448}, {70, 70, 28, 3136, 12845056, 56, 56},
    {42, 100, 28, 56, 12845056, 56, 112},     {1000, 500, 28, 3136, 200704, 616, 308},
    {10, 20, 28, 3136, 12845056, 56, 84},     {300, 451, 32, 65536, 16777216, 288, 448},
};

TEST(PreprocessTest, SmartResizeAsHf) {
  for (const SmartCase& c : kSmart) {
    const StatusOr<Size> s = smart_resize(c.h, c.w, c.factor, c.min_pixels, c.max_pixels);
    QBC_ASSERT_OK(s);
    EXPECT_EQ(s->height, c.want_h) << c.h << "x" << c.w;
    EXPECT_EQ(s->width, c.want_w) << c.h << "x" << c.w;
  }
  const StatusOr<Size> thin = smart_resize(1, 201, 28, 3136, 12845056);
  ASSERT_FALSE(thin.ok());
  EXPECT_TRUE(testing::contains(thin.status().message(), "aspect ratio"));
}

TEST(PreprocessTest, ParsesTheQwenKeysAndDefaults) {
  const StatusOr<PreprocessSpec> s = parse_preprocess_spec(
      R"({"image_processor_type": "Qwen2VLImageProcessorFast", "patch_size": 16,
          "size": {"longest_edge": 16777216, "shortest_edge": 65536},
          "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]})",
      "p.json");
  QBC_ASSERT_OK(s);
  EXPECT_EQ(s->rule, ResizeRule::kSmart);
  EXPECT_EQ(s->filter, Filter::kBicubic);  // HF's default resample for Qwen2-VL
  EXPECT_EQ(s->patch_size, 16);
  EXPECT_EQ(s->merge_size, 2);
  EXPECT_EQ(s->temporal_patch_size, 2);
  EXPECT_EQ(s->min_pixels, 65536);
  EXPECT_EQ(s->max_pixels, 16777216);
  EXPECT_DOUBLE_EQ(s->rescale_factor, 1.0 / 255.0);
}

TEST(PreprocessTest, RefusesWhatItDoesNotImplementNamingTheKey) {
  struct Case {
    const char* json;
    Code code;
    const char* says;
  };
  for (const Case& c : {
           Case{R"({"image_processor_type": "IdeficsImageProcessor"})", Code::kUnimplemented,
                "IdeficsImageProcessor"},
           Case{R"({"image_processor_type": "Gemma3ImageProcessor", "do_pan_and_scan": true})",
                Code::kUnimplemented, "do_pan_and_scan"},
           Case{R"({"image_processor_type": "CLIPImageProcessor", "resample": 4})",
                Code::kUnimplemented, "resample"},
           Case{R"({"image_processor_type": "Idefics3ImageProcessor", "size": 2048})",
                Code::kInvalidArgument, "size"},
           Case{R"({"image_processor_type": "Idefics3ImageProcessor",
                    "max_image_size": {"longest_edge": 0}})",
                Code::kInvalidArgument, "max_image_size"},
           Case{R"({"image_processor_type": "CLIPImageProcessor", "image_std": [1, 0, 1]})",
                Code::kInvalidArgument, "image_std"},
           Case{R"({"image_processor_type": "Qwen2VLImageProcessor", "patch_size": -3})",
                Code::kInvalidArgument, "patch_size"},
           Case{R"({"resample": 3})", Code::kInvalidArgument, "image_processor_type"},
           Case{R"([1, 2])", Code::kInvalidArgument, "object"},
       }) {
    const StatusOr<PreprocessSpec> s = parse_preprocess_spec(c.json, "p.json");
    ASSERT_FALSE(s.ok()) << c.json;
    EXPECT_EQ(s.status().code(), c.code) << c.json << ": " << s.status().message();
    EXPECT_TRUE(testing::contains(s.status().message(), "p.json")) << s.status().message();
    EXPECT_TRUE(testing::contains(s.status().message(), c.says)) << s.status().message();
  }
}

TEST(PreprocessTest, RescaleAndNormalizeAsHf) {
  const StatusOr<PreprocessSpec> s =
      parse_preprocess_spec(R"({"image_processor_type": "CLIPImageProcessor"})", "p.json");
  QBC_ASSERT_OK(s);
  // (v / 255 - mean) / std with OpenAI CLIP's mean and std.
  EXPECT_NEAR(normalize_sample(*s, 0, 0), (0.0 - 0.48145466) / 0.26862954, 1e-6);
  EXPECT_NEAR(normalize_sample(*s, 1, 255), (1.0 - 0.4578275) / 0.26130258, 1e-6);
  EXPECT_NEAR(normalize_sample(*s, 2, 128), (128.0 / 255 - 0.40821073) / 0.27577711, 1e-6);
  const StatusOr<PreprocessSpec> raw = parse_preprocess_spec(
      R"({"image_processor_type": "CLIPImageProcessor", "do_normalize": false})", "p.json");
  QBC_ASSERT_OK(raw);
  EXPECT_FLOAT_EQ(normalize_sample(*raw, 0, 51), 0.2f);
}

Image gradient(int32_t w, int32_t h) {
  Image im;
  im.width = w;
  im.height = h;
  for (int32_t y = 0; y < h; ++y)
    for (int32_t x = 0; x < w; ++x) {
      const int v = y * w + x;
      im.rgb.insert(im.rgb.end(), {static_cast<uint8_t>(v), static_cast<uint8_t>(100 + v),
                                   static_cast<uint8_t>(200 + v)});
    }
  return im;
}

TEST(PreprocessTest, QwenPatchOrderAsHf) {
  // An 8 x 4 image (w x h), patch 2, merge 2, two frames: no resize (factor 4 divides both),
  // no rescale or normalize, so each value is its pixel: R = 8y + x, G = 100 + R, B = 200 + R.
  const StatusOr<PreprocessSpec> s = parse_preprocess_spec(
      R"({"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 2, "merge_size": 2,
          "temporal_patch_size": 2, "min_pixels": 16, "max_pixels": 1024,
          "do_rescale": false, "do_normalize": false})",
      "p.json");
  QBC_ASSERT_OK(s);
  const StatusOr<Pixels> px = preprocess(gradient(8, 4), *s, "g");
  QBC_ASSERT_OK(px);
  EXPECT_EQ(px->grid_h, 2);
  EXPECT_EQ(px->grid_w, 4);
  ASSERT_EQ(px->shape, (std::vector<int64_t>{8, 24}));  // 2 x 4 patches; 3 x 2 x 2 x 2 values
  // Rows go by 2x2 merge groups: group (0, 1) holds patches (0,2) (0,3) (1,2) (1,3), rows 4..7.
  // Row 5 is patch (0, 3): pixels y 0..1, x 6..7. Columns: channel, frame, y, x.
  const std::vector<float> row5 = {6,   7,   14,  15,  6,   7,   14,  15,  106, 107, 114, 115,
                                   106, 107, 114, 115, 206, 207, 214, 215, 206, 207, 214, 215};
  for (size_t j = 0; j < row5.size(); ++j) EXPECT_EQ(px->values[5 * 24 + j], row5[j]) << j;
  // Row 2 is patch (1, 0) of group (0, 0): pixels y 2..3, x 0..1.
  EXPECT_EQ(px->values[2 * 24 + 0], 16);
  EXPECT_EQ(px->values[2 * 24 + 3], 25);
}

TEST(PreprocessTest, ShortestEdgeThenCentreCrop) {
  // CLIP, shortest edge 4, crop 4 x 4, on 8 x 4 (w x h): the long side int(4 * 8 / 4) = 8, no
  // resize; crop left (8 - 4) / 2 = 2.
  const StatusOr<PreprocessSpec> s = parse_preprocess_spec(
      R"({"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 4},
          "crop_size": {"height": 4, "width": 4}, "do_rescale": false, "do_normalize": false})",
      "p.json");
  QBC_ASSERT_OK(s);
  const StatusOr<Pixels> px = preprocess(gradient(8, 4), *s, "g");
  QBC_ASSERT_OK(px);
  ASSERT_EQ(px->shape, (std::vector<int64_t>{3, 4, 4}));
  EXPECT_EQ(px->values[0], 2);              // R at (0, 2)
  EXPECT_EQ(px->values[16 + 5], 100 + 11);  // G at (1, 3)
  // llava's 336 on 451 x 300: long side int(336 * 451 / 300 = 505.12) = 505; on 427 x 640
  // (portrait): int(336 * 640 / 427 = 503.6) = 503.
  PreprocessSpec llava = *s;
  llava.shortest_edge = 336;
  const StatusOr<Size> wide = resized_size(llava, 300, 451);
  QBC_ASSERT_OK(wide);
  EXPECT_EQ(*wide, (Size{336, 505}));
  const StatusOr<Size> tall = resized_size(llava, 640, 427);
  QBC_ASSERT_OK(tall);
  EXPECT_EQ(*tall, (Size{503, 336}));
  // Compiled at 224 (vision.imageSize of a LLaVA): the crop 224 square and the shortest edge
  // in the same ratio to it (336 : 336), so 451 x 300 resizes to int(224 * 451 / 300) = 336.
  llava.crop_height = llava.crop_width = 336;
  llava.compiled_size = 224;
  const StatusOr<Size> small = resized_size(llava, 300, 451);
  QBC_ASSERT_OK(small);
  EXPECT_EQ(*small, (Size{224, 336}));
  const StatusOr<Pixels> cropped = preprocess(gradient(451, 300), llava, "g");
  QBC_ASSERT_OK(cropped);
  EXPECT_EQ(cropped->shape, (std::vector<int64_t>{3, 224, 224}));
  // A crop of another ratio keeps it: shortest edge 256, crop 224, compiled 112 -> 128 then 112.
  llava.shortest_edge = 256;
  llava.crop_height = llava.crop_width = 224;
  llava.compiled_size = 112;
  const StatusOr<Size> ratio = resized_size(llava, 300, 451);
  QBC_ASSERT_OK(ratio);
  EXPECT_EQ(ratio->height, 128);
  const StatusOr<Pixels> half = preprocess(gradient(451, 300), llava, "g");
  QBC_ASSERT_OK(half);
  EXPECT_EQ(half->shape, (std::vector<int64_t>{3, 112, 112}));
}

struct PhotoCase {
  const char* config;
  const char* image;
  std::vector<int64_t> shape;
};

// Shapes worked out by hand: Qwen2.5-VL factor 28 (chelsea 300x451 -> 308x448: 22x32 = 704
// patches of 3*2*14*14 = 1176; rocket 427x640 -> 420x644: 30x46 = 1380; 512 -> 504: 36^2 =
// 1296), Qwen3-VL factor 32 (chelsea -> 288x448: 18x28 = 504 of 1536; rocket -> 416x640: 26x40
// = 1040; 512: 32^2 = 1024), gemma 896 fixed, llava 336 crop.
// Idefics3ImageProcessor: its __init__ defaults (longest edge 4 x 364, tiles of 364, Lanczos,
// mean = std = 0.5, splitting on) and the published SmolVLM-256M-Instruct file's values.
TEST(PreprocessTest, ParsesTheIdefics3KeysAndDefaults) {
  StatusOr<PreprocessSpec> s =
      parse_preprocess_spec(R"({"image_processor_type": "Idefics3ImageProcessor"})", "p.json");
  QBC_ASSERT_OK(s);
  EXPECT_EQ(s->rule, ResizeRule::kTiles);
  EXPECT_EQ(s->longest_edge, 1456);
  EXPECT_EQ(s->tile, 364);
  EXPECT_TRUE(s->split);
  EXPECT_EQ(s->filter, Filter::kLanczos);
  EXPECT_DOUBLE_EQ(s->mean[0], 0.5);
  EXPECT_EQ(tiled_side(*s), 1456);  // 4 whole tiles
  const std::filesystem::path path = ::qbc::testing::source_dir() /
                                     "tests/assets/model-configs/SmolVLM-256M-Instruct/"
                                     "preprocessor_config.json";
  s = load_preprocess_spec(path.string());
  QBC_ASSERT_OK(s);
  EXPECT_EQ(s->longest_edge, 2048);
  EXPECT_EQ(s->tile, 512);
  EXPECT_EQ(s->filter, Filter::kLanczos);
  s->longest_edge = 1100;  // not whole tiles: rounded up, as resize_for_vision_encoder's ceil
  EXPECT_EQ(tiled_side(*s), 1536);
  s->compiled_size = 1024;
  EXPECT_EQ(tiled_side(*s), 1024);
}

// The views of an image (Idefics3ImageProcessor's split_image at a compiled square): the image
// resized to the square, its tiles row by row, then the square resized to one tile; each view
// is the tile's pixels, normalized. Checked against the resize and crop they are made of.
TEST(PreprocessTest, Idefics3ViewsAreTheTilesRowByRowThenTheGlobalView) {
  PreprocessSpec s;
  s.rule = ResizeRule::kTiles;
  s.filter = Filter::kLanczos;
  s.tile = 4;
  s.longest_edge = 8;
  s.mean = {0.5, 0.5, 0.5};
  s.std = {0.5, 0.5, 0.5};
  Image img;
  img.width = 7;
  img.height = 5;
  img.rgb.resize(7 * 5 * 3);
  for (size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = static_cast<uint8_t>((i * 37) % 251);
  s.compiled_size = 8;
  StatusOr<std::vector<Pixels>> views = preprocess_views(img, s, "img");
  QBC_ASSERT_OK(views);
  ASSERT_EQ(views->size(), 5u);  // 2 x 2 tiles and the global view
  const Image square = resize(img, 8, 8, Filter::kLanczos);
  const auto expect_view = [&](const Pixels& px, const Image& want, const std::string& what) {
    ASSERT_EQ(px.shape, (std::vector<int64_t>{3, 4, 4})) << what;
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < 4; ++y)
        for (int x = 0; x < 4; ++x)
          EXPECT_EQ(px.values[static_cast<size_t>((c * 4 + y) * 4 + x)],
                    normalize_sample(s, c, want.at(y, x, c)))
              << what << " c" << c << " y" << y << " x" << x;
  };
  expect_view((*views)[0], crop(square, 0, 0, 4, 4), "tile r1 c1");
  expect_view((*views)[1], crop(square, 0, 4, 4, 4), "tile r1 c2");
  expect_view((*views)[2], crop(square, 4, 0, 4, 4), "tile r2 c1");
  expect_view((*views)[3], crop(square, 4, 4, 4, 4), "tile r2 c2");
  expect_view((*views)[4], resize(square, 4, 4, Filter::kLanczos), "global view");
  // preprocess() gives the last view; one tile per side, or splitting off, gives it alone.
  StatusOr<Pixels> one = preprocess(img, s, "img");
  QBC_ASSERT_OK(one);
  EXPECT_EQ(one->values, (*views)[4].values);
  s.split = false;
  views = preprocess_views(img, s, "img");
  QBC_ASSERT_OK(views);
  ASSERT_EQ(views->size(), 1u);
  s.split = true;
  s.compiled_size = 4;
  views = preprocess_views(img, s, "img");
  QBC_ASSERT_OK(views);
  ASSERT_EQ(views->size(), 1u);
  expect_view((*views)[0], resize(img, 4, 4, Filter::kLanczos), "the only view");
  s.compiled_size = 6;  // not whole tiles
  views = preprocess_views(img, s, "img");
  ASSERT_FALSE(views.ok());
  EXPECT_TRUE(testing::contains(views.status().message(), "img")) << views.status().message();
}

// Pixel-shuffle groups: each 2 x 2 block of a 4 x 4 grid's rows together, blocks row-major.
TEST(PreprocessTest, ShuffleGroupRowsPutsEachTokensPatchesTogether) {
  std::vector<float> rows(16 * 2);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(i / 2) + (i % 2) * 0.5f;
  const std::vector<float> got = shuffle_group_rows(rows, 2, 4, 2);
  const int order[] = {0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15};
  for (size_t r = 0; r < 16; ++r) {
    EXPECT_EQ(got[2 * r], static_cast<float>(order[r])) << r;
    EXPECT_EQ(got[2 * r + 1], static_cast<float>(order[r]) + 0.5f) << r;
  }
  EXPECT_EQ(shuffle_group_rows(rows, 2, 4, 1), rows);
}

TEST(PreprocessTest, SharedPhotographsThroughTheRealConfigs) {
  const PhotoCase cases[] = {
      {"Qwen2.5-VL-3B-Instruct", "chelsea.png", {704, 1176}},
      {"Qwen2.5-VL-3B-Instruct", "rocket.jpg", {1380, 1176}},
      {"Qwen2.5-VL-3B-Instruct", "camera.png", {1296, 1176}},
      {"Qwen3-VL-4B-Instruct", "chelsea.png", {504, 1536}},
      {"Qwen3-VL-4B-Instruct", "rocket.jpg", {1040, 1536}},
      {"Qwen3-VL-4B-Instruct", "gravel.png", {1024, 1536}},
      {"gemma-3-4b-it", "chelsea.png", {3, 896, 896}},
      {"gemma-3-4b-it", "camera.png", {3, 896, 896}},
      {"llava-1.5-7b-hf", "rocket.jpg", {3, 336, 336}},
      {"llava-1.5-7b-hf", "gravel.png", {3, 336, 336}},
  };
  for (const PhotoCase& c : cases) {
    QBC_REQUIRE_SHARED(config,
                       std::string("model-configs-new/") + c.config + "/preprocessor_config.json");
    QBC_REQUIRE_SHARED(photo, std::string("data/images/") + c.image);
    const StatusOr<PreprocessSpec> spec = load_preprocess_spec(config.string());
    QBC_ASSERT_OK(spec);
    const StatusOr<Image> im = decode_file(photo.string());
    QBC_ASSERT_OK(im);
    const StatusOr<Pixels> px = preprocess(*im, *spec, c.image);
    QBC_ASSERT_OK(px);
    EXPECT_EQ(px->shape, c.shape) << c.config << " " << c.image;
    int64_t n = 1;
    for (int64_t d : px->shape) n *= d;
    ASSERT_EQ(static_cast<int64_t>(px->values.size()), n);
    // Normalized values stay within (0 - mean) / std .. (1 - mean) / std.
    for (float v : px->values) {
      ASSERT_GE(v, -1.80f);
      ASSERT_LE(v, 2.15f);
    }
  }
}

}  // namespace
}  // namespace qbc::image
