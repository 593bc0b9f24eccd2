// Image preprocessing as the HF image processors do it, driven by the model's
// preprocessor_config.json (docs/multimodal.md, "Preprocessing"):
//   Qwen2VLImageProcessor(Fast)  smart_resize to multiples of patch_size * merge_size within
//                                [min_pixels, max_pixels], bicubic; then the patches flattened
//                                in Qwen2-VL's order (temporal_patch_size frames, merge_size
//                                groups)
//   CLIPImageProcessor           shortest edge to size.shortest_edge, then a centre crop
//   Gemma3ImageProcessor,        a fixed size.height x size.width (aspect ratio not kept)
//   SiglipImageProcessor
//   Idefics3ImageProcessor,      the image resized to the compiled square (whole tiles), cut
//   SmolVLMImageProcessor        into tiles of max_image_size.longest_edge row by row, then
//                                resized to one tile (the global view); Lanczos
// then rescale (x * rescale_factor, in double, stored as float) and normalize ((x - mean) /
// std in float), as transformers.image_transforms.rescale / normalize.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "qbc/image/image.h"
#include "qbc/image/resize.h"
#include "qbc/support/status.h"

namespace qbc::image {

enum class ResizeRule {
  kSmart,         ///< Qwen2-VL smart_resize
  kShortestEdge,  ///< CLIP: shortest edge, aspect kept (long edge truncated), then crop
  kFixed,         ///< height x width
  kTiles,         ///< Idefics3: tiles of `tile` pixels and a global view (preprocess_views)
};

struct PreprocessSpec {
  std::string processor;  ///< image_processor_type, as written
  ResizeRule rule = ResizeRule::kFixed;
  Filter filter = Filter::kBicubic;
  int32_t height = 0, width = 0;  ///< kFixed
  int32_t shortest_edge = 0;      ///< kShortestEdge
  bool center_crop = false;       ///< kShortestEdge: crop to crop_height x crop_width
  int32_t crop_height = 0, crop_width = 0;
  int64_t min_pixels = 0, max_pixels = 0;  ///< kSmart
  int32_t longest_edge = 0;                ///< kTiles: size.longest_edge
  int32_t tile = 0;                        ///< kTiles: max_image_size.longest_edge
  bool split = true;                       ///< kTiles: do_image_splitting
  int32_t patch_size = 0;                  ///< kSmart: also the patch order below
  int32_t temporal_patch_size = 1, merge_size = 1;
  /// When > 0, the compiled vision part's image side (a compiled part fixes its patch grid, as
  /// every NPU toolchain does). kSmart: every image is resized to compiled_size x compiled_size
  /// instead of smart_resize's size (the aspect ratio is not kept). kShortestEdge with a centre
  /// crop: the crop becomes compiled_size square and the shortest edge keeps its ratio to it
  /// (round(shortest_edge · compiled_size / crop_height)). kFixed: compiled_size square. Not read
  /// kTiles: the image is resized to compiled_size square and cut into (compiled_size / tile)²
  /// tiles. Not read from the file: the compiler and the runtime set it to the compiled image
  /// size.
  int32_t compiled_size = 0;
  bool rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool normalize = true;
  std::array<double, 3> mean = {0.0, 0.0, 0.0}, std = {1.0, 1.0, 1.0};

  /// Qwen2-VL's patch rows (kSmart) instead of a CHW image.
  bool flattens_patches() const { return rule == ResizeRule::kSmart; }
};

/// The spec of a preprocessor_config.json's text; `name` (the file) starts every error.
/// Unknown processors and options that change the pixels but are not implemented
/// (do_pan_and_scan, do_convert_rgb false, ...) are kUnimplemented naming the key.
StatusOr<PreprocessSpec> parse_preprocess_spec(std::string_view json_text, std::string_view name);
StatusOr<PreprocessSpec> load_preprocess_spec(const std::string& path);

struct Size {
  int32_t height = 0, width = 0;
  bool operator==(const Size& o) const { return height == o.height && width == o.width; }
};

/// HF's Qwen2-VL smart_resize(height, width, factor, min_pixels, max_pixels): both sides
/// multiples of `factor`, the area within the bounds, the aspect ratio kept as closely as
/// possible. kInvalidArgument when the aspect ratio exceeds 200 (HF's ValueError).
StatusOr<Size> smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                            int64_t max_pixels);

/// The size the resize step gives an image of height x width (before any crop).
StatusOr<Size> resized_size(const PreprocessSpec& spec, int32_t height, int32_t width);

/// The model input of one image. For kSmart, `values` is [grid_t * grid_h * grid_w,
/// 3 * temporal_patch_size * patch_size^2] (HF's pixel_values, one row per patch, rows in
/// merge-group order); otherwise [3, height, width] (CHW).
struct Pixels {
  std::vector<float> values;
  std::vector<int64_t> shape;
  int32_t grid_t = 1, grid_h = 0, grid_w = 0;  ///< kSmart: patches per axis
  Size size;                                   ///< the image size after resize and crop
};

/// The image after resize and crop, still 8-bit (what HF hands to rescale).
StatusOr<Image> resize_for_model(const Image& img, const PreprocessSpec& spec,
                                 std::string_view name);
/// Resize, crop, rescale, normalize and (kSmart) flatten. kTiles: the last view of
/// preprocess_views (the global view, or the only one).
StatusOr<Pixels> preprocess(const Image& img, const PreprocessSpec& spec, std::string_view name);

/// Every input the tower takes for one image, in the order its features enter the prompt. One
/// view for every rule but kTiles. kTiles (Idefics3ImageProcessor at a square size S = the
/// compiled size, else size.longest_edge rounded up to whole tiles): the image resized to S x S;
/// when S > tile and splitting is on, its (S / tile)² tiles row by row and then the global view,
/// the S x S image resized to tile x tile; otherwise that global view alone. Each view is CHW
/// [3, tile, tile]. HF resizes the longest edge to size.longest_edge and keeps the aspect ratio
/// (so a non-square photograph gets fewer tiles on its short side); a compiled part fixes the
/// tile grid, so a non-square image is stretched to the square instead (docs/multimodal.md).
StatusOr<std::vector<Pixels>> preprocess_views(const Image& img, const PreprocessSpec& spec,
                                               std::string_view name);

/// kTiles: the side of the square preprocess_views cuts (see there); 0 for other rules.
int32_t tiled_side(const PreprocessSpec& spec);

/// Patch rows of CHW pixels [3, side, side] for a ViT whose patch embedding is a Conv2d of
/// kernel = stride = `patch` read as a matmul (CLIP, SigLIP): `leading` zero rows first (CLIP's
/// CLS slot), then one row per patch in row-major grid order, each (channel, y, x) as the
/// Conv2d weight [width, 3, patch, patch] reads it. Both the compiler (calibration) and the
/// runtime (`qbc run --image`) make the tower's input with it.
std::vector<float> patch_rows(const std::vector<float>& chw, int64_t side, int64_t patch,
                              int64_t leading = 0);

/// `rows` [grid², width] of a grid x grid patch grid in row-major order, reordered into pixel
/// shuffle groups (Idefics3's connector): for each token (Y, X) of the (grid / scale)² grid,
/// row-major, the rows of patches (Y·scale + dy, X·scale + dx) for dy, dx row-major.
/// grid % scale == 0. The compiler (calibration, position rows) and the runtime both use it.
std::vector<float> shuffle_group_rows(const std::vector<float>& rows, int64_t width, int64_t grid,
                                      int64_t scale);

/// The rescaled, normalized value of channel c of 8-bit sample v.
float normalize_sample(const PreprocessSpec& spec, int c, uint8_t v);

}  // namespace qbc::image
