// The vision part of a VLM's MXQ on the runtime (docs/multimodal.md "Running with an image"):
// an image decoded (PNG, JPEG), preprocessed as the file's preprocessor_config.json asset says,
// cut into the tower's patch rows, run through the vision part's feature bundle (its own
// simulated device), and the feature rows the language model reads in place of the image
// placeholder tokens. Everything comes from the file: the spec, the tower's constant inputs
// (the vision part's assets: CLIP's embed_base, Qwen2.5-VL's rope tables), the window order of
// a tower that works in one, the rows to drop, the placeholder id.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "qbc/image/image.h"
#include "qbc/image/preprocess.h"
#include "qbc/mxq/model_file.h"
#include "qbc/runtime/feature_session.h"
#include "qbc/support/status.h"

namespace qbc::runtime {

class VisionEncoder {
 public:
  /// The vision part of `file` for `scheme` (the language model's mode when the vision part has
  /// it, else its first mode). kInvalidArgument when the file has no vision part (naming it);
  /// the program verifier's and the assets' errors name the file.
  static StatusOr<std::unique_ptr<VisionEncoder>> create(const mxq::LoadedModel& file,
                                                         isa::Scheme scheme, int host_threads = 0);

  /// The rows one image gives the language model: [tokens_per_image(), row_width()], fp32 (the
  /// feature row divided by the file's feature divisor, Gemma 3's embedding scale; on Qwen3-VL
  /// followed by the token's DeepStack rows, as NpuSession::splice takes them). Idefics3: one
  /// call of the vision program per tile and one for the global view, their rows in that order.
  StatusOr<std::vector<float>> encode(const image::Image& img, std::string_view name);
  /// encode() of the PNG or JPEG file at `path` (image::decode_file's limits).
  StatusOr<std::vector<float>> encode_file(const std::string& path);

  int32_t image_token_id() const { return part_.image_token_id(); }
  int64_t tokens_per_image() const { return part_.tokens_per_image(); }
  /// The token that marks an image in the user's prompt (Gemma 3: <start_of_image>; else the
  /// image token itself), and the expansion of one mark: the file's image span when it has one
  /// (Idefics3's tile markers), else the prefix ids, tokens_per_image() image tokens, the suffix
  /// ids.
  int32_t prompt_token_id() const {
    return part_.has_prompt_token_id() ? part_.prompt_token_id() : part_.image_token_id();
  }
  std::vector<int32_t> image_span() const;
  int64_t width() const { return part_.feature_width(); }
  /// DeepStack levels (Qwen3-VL; 0: none) and the values per row: width() per level and the
  /// features.
  int64_t deepstack_levels() const { return part_.deepstack_levels(); }
  int64_t row_width() const { return part_.feature_width() * (1 + part_.deepstack_levels()); }

 private:
  VisionEncoder() = default;
  /// The rows of one view (one call of the vision program).
  StatusOr<std::vector<float>> encode_view(const image::Pixels& px, std::string_view name);
  /// Groups of `unit` values in the tower's window order (back = false: from the image's
  /// order) or back to the image's order.
  std::vector<float> permute_groups(const std::vector<float>& v, int64_t unit, bool back) const;

  mxq::pb::VisionPart part_;
  image::PreprocessSpec spec_;
  /// The tower's inputs in the bundle's order: the constants from the assets, the patches'
  /// slot filled per image.
  std::vector<std::vector<float>> inputs_;
  std::vector<int64_t> window_order_;  ///< empty: the tower works in the image's order
  std::unique_ptr<FeatureSession> session_;
};

}  // namespace qbc::runtime
