// The vision part of a VLM compile (docs/multimodal.md "One file"): the tower's graph from the
// folder, calibrated on images (or synthetic ones), quantized with the vision recipe, lowered
// by the backend into a feature bundle for the language model's target and schemes, and the
// host constants and metadata the runtime needs to turn an image into the rows spliced in at
// the image tokens. write_mxq packs it as the vision section of the language model's file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/driver/vision_block_error.h"
#include "qbc/isa/program.h"
#include "qbc/mxq/model_file.h"
#include "qbc/npu/compile.h"
#include "qbc/quant/output_basis.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// The asset of the language part's file holding the model's preprocessor_config.json.
inline constexpr const char* kPreprocessorAsset = "preprocessor_config.json";

/// A compiled vision part, before it is written.
struct VisionBuild {
  isa::Bundle bundle;  ///< the feature bundle (with its weight image)
  /// The tower's constant inputs (every feature input but `patches`) by name, [rows, width]:
  /// CLIP's `embed_base`, Qwen2.5-VL's `rope_cos` and `rope_sin`.
  std::vector<std::pair<std::string, std::vector<float>>> constants;
  /// A tower in window order (Qwen2.5-VL): its merge group k is the image's group
  /// window_order[k]; empty otherwise.
  std::vector<int64_t> window_order;
  mxq::pb::VisionPart part;  ///< everything but model_hash
  /// Text around each image span that the processor writes (Gemma 3: "\n\n" before
  /// <start_of_image> and after <end_of_image>); the MXQ writer encodes it with the model's
  /// tokenizer into the part's image_prefix_ids / image_suffix_ids.
  std::string prefix_text, suffix_text;
  /// Idefics3: the processor's whole text for one image (tile markers, newlines and "<image>"
  /// per feature row), which the MXQ writer encodes into the part's image_span_ids.
  std::string span_text;
  std::string architecture;       ///< "llava/clip"
  std::string preprocessor_json;  ///< the folder's preprocessor_config.json
  std::string calibration_json;   ///< images used: {"images": N, "source": "files"|"synthetic"}
  std::string graph_name;
  int calibration_images = 0;
  bool synthetic_calibration = false;
  /// Each tower block's SQNR, quantized against float, on the calibration images.
  std::vector<TowerBlockError> block_errors;
};

/// What the compile summary says about a VLM folder's vision part.
struct VisionOutcome {
  bool present = false;  ///< the folder has a vision_config
  bool compiled = false;
  std::string reason;  ///< not compiled: why (the family's tower does not lower yet)
  // compiled:
  int64_t rows = 0, width = 0;   ///< feature rows per call and their width (the hidden size)
  int64_t views = 1;             ///< calls per image (Idefics3: tiles and the global view)
  int64_t deepstack_levels = 0;  ///< Qwen3-VL: DeepStack rows of that width after each feature row
  int64_t dram_bytes = 0;        ///< the vision part's DRAM plan
  int calibration_images = 0;
  bool synthetic_calibration = false;
  std::vector<TowerBlockError> block_errors;  ///< VisionBuild::block_errors
  double seconds = 0;
};

/// The vision part of the HF folder `model`: nullopt when it has no vision_config. For a
/// tower the backend does not lower yet, kUnimplemented naming the family and the op. `images`
/// are calibration images (PNG or JPEG paths; empty: `synthetic` smooth random images, said in
/// the calibration record); `language` gives the target and the schemes. `rotation`: the
/// quantized language model's basis (quant::output_basis of its graph); when spinR1 rotated
/// its residual stream, the tower's output linears are rotated alike (W ← Rᵀ·W, b ← Rᵀ·b), so
/// the features land in the rotated stream, and the part records the seed.
StatusOr<std::optional<VisionBuild>> build_vision_part(
    const std::string& model, const config::ResolvedConfig& cfg, const npu::Options& language,
    const std::vector<std::string>& images, int synthetic = 4,
    const quant::OutputBasis* rotation = nullptr);

/// The float features of images as the runtime splices them into a VLM's language model, for
/// calibration on image-text pairs (`qbc calib prepare --images`).
struct FloatImageFeatures {
  /// per image [tokens, width * (1 + deepstack_levels)]: each token's feature row, then its
  /// DeepStack rows (Qwen3-VL), as runtime::VisionEncoder gives them
  std::vector<std::vector<float>> rows;
  int64_t tokens = 0, width = 0;  ///< image tokens per image, the language hidden size
  int64_t deepstack_levels = 0;
  /// The ids around the image tokens (Gemma 3's, as VisionBuild has them; Qwen's
  /// <|vision_start|> / <|vision_end|>, which its prompts carry) and the processor's text around
  /// them (Gemma 3).
  std::vector<int32_t> prefix, suffix;
  std::string prefix_text, suffix_text;
  /// Idefics3: the whole span as text (VisionBuild::span_text); replaces the four above.
  std::string span_text;
  int64_t image_token = -1;  ///< the id each feature row takes in span_text
};

/// `images` (PNG / JPEG paths) through the HF folder `model`'s preprocessing and its float
/// vision tower and projector (the float reference runtime): the rows the runtime splices (a
/// CLS row dropped, back in image order, divided by the feature divisor). With no images, the
/// span's layout alone (tokens, ids, text), without running the tower. kInvalidArgument for a
/// folder without a vision_config, kUnimplemented for a family whose tower is not built.
StatusOr<FloatImageFeatures> float_image_features(const std::string& model,
                                                  const config::ResolvedConfig& cfg,
                                                  const std::vector<std::string>& images);

/// True when `model` is an HF folder whose config.json has a vision_config (of any family).
StatusOr<bool> has_vision_part(const std::string& model);

/// The image files (.png, .jpg, .jpeg, any case) of `dir`, sorted by name; kNotFound /
/// kInvalidArgument naming the folder when it is missing or holds none.
StatusOr<std::vector<std::string>> list_images(const std::string& dir);

/// The configuration's vision.imageSize checked against the folder `model` before any work:
/// ok when it is 0; kInvalidArgument when the model has no vision part or the tower cannot
/// take the size (frontend::set_image_size; a Qwen processor's min_pixels / max_pixels),
/// kUnimplemented for another size of a tower with learned positions.
Status check_vision_image_size(const std::string& model, int64_t image_size);

}  // namespace qbc::driver
