// libFuzzer target: the PNG and JPEG decoders (qbc/image/image.h), and what decodes through the
// Qwen2-VL and CLIP preprocessing (resize, crop, normalize, patch order) and Idefics3's tiles
// (Lanczos to a 2 x 2 tile square, the tiles and the global view).
#include <vector>

#include "fuzz_util.h"
#include "qbc/image/image.h"
#include "qbc/image/preprocess.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Smaller limits than the defaults keep each input fast (a 64 Mpixel bomb decodes in ~1 s).
  qbc::image::DecodeLimits limits;
  limits.max_side = 4096;
  limits.max_pixels = int64_t{4} << 20;
  const qbc::StatusOr<qbc::image::Image> img =
      qbc::image::decode_bytes(data, size, "sample.img", limits);
  qbc::fuzz::check(img.status());
  if (!img.ok()) return 0;
  static const auto qwen = qbc::image::parse_preprocess_spec(
      R"({"image_processor_type": "Qwen2VLImageProcessor", "min_pixels": 784,
          "max_pixels": 12544})",
      "qwen");
  static const auto clip = qbc::image::parse_preprocess_spec(
      R"({"image_processor_type": "CLIPImageProcessor", "size": {"shortest_edge": 32},
          "crop_size": {"height": 32, "width": 32}})",
      "clip");
  static const auto tiles = qbc::image::parse_preprocess_spec(
      R"({"image_processor_type": "Idefics3ImageProcessor", "size": {"longest_edge": 32},
          "max_image_size": {"longest_edge": 16}})",
      "tiles");
  for (const auto* spec : {&qwen, &clip}) {
    if (!spec->ok()) std::abort();
    qbc::fuzz::check(qbc::image::preprocess(*img, **spec, "sample.img").status());
  }
  if (!tiles.ok()) std::abort();
  const auto views = qbc::image::preprocess_views(*img, *tiles, "sample.img");
  qbc::fuzz::check(views.status());
  if (views.ok() && views->size() != 5) std::abort();  // 2 x 2 tiles and the global view
  return 0;
}
