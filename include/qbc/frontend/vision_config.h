// The vision part of a vision-language model's config.json (docs/multimodal.md, "Families"):
// which tower, its shape, the projector, the image tokens and how many an image takes. Read for
// qwen2_vl, qwen2_5_vl, qwen3_vl, gemma3, llava, idefics3 and smolvlm configs; the parameter count
// follows the HF modeling code's modules (docs/multimodal.md gives the formulas and the published
// totals they reproduce).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qbc/support/status.h"

namespace qbc::frontend {

enum class VisionTower {
  kQwen2Vit,   ///< Qwen2-VL: LayerNorm, GELU MLP, 2-D RoPE
  kQwen25Vit,  ///< Qwen2.5-VL: RMSNorm, SwiGLU, window attention but fullatt blocks
  kQwen3Vit,   ///< Qwen3-VL: LayerNorm, GELU MLP, learned position grid + 2-D RoPE, DeepStack
  kSiglip,     ///< SigLIP (Gemma 3, Idefics3 / SmolVLM)
  kClip,       ///< CLIP ViT (LLaVA)
};
enum class VisionProjector {
  kQwenMerger,    ///< norm + 2-layer MLP over merge x merge patches
  kGemmaSoftEmb,  ///< average pool, RMSNorm (mm_soft_emb_norm), linear
  kLlavaMlp,      ///< linear, GELU, linear
  kPixelShuffle,  ///< Idefics3 / SmolVLM: scale x scale patches into one row, linear (no bias)
};

std::string_view vision_tower_name(VisionTower t);
std::string_view vision_projector_name(VisionProjector p);

struct VisionConfig {
  std::string model_type;  ///< config.json's model_type ("qwen2_5_vl", "gemma3", ...)
  VisionTower tower = VisionTower::kClip;
  VisionProjector projector = VisionProjector::kLlavaMlp;
  int64_t depth = 0, width = 0, heads = 0, ffn = 0;
  int64_t patch_size = 0;
  int64_t temporal_patch_size = 1;  ///< Qwen: frames per patch (an image is repeated)
  int64_t merge = 1;                ///< Qwen: spatial_merge_size; Idefics3: scale_factor
  int64_t pool = 1;                 ///< Gemma 3: average-pool window per side
  int64_t text_hidden = 0;          ///< the width the projector writes (the LLM's hidden size)
  /// The image side the tokens per image are counted at: the tower's fixed size, or for the
  /// dynamic-resolution Qwen towers kDefaultDynamicImageSize.
  int64_t image_size = 0;
  bool dynamic_resolution = false;
  /// Idefics3 / SmolVLM: the tower's own side (vision_config.image_size, the processor's
  /// max_image_size). An image of image_size (a multiple of it) is cut into tiles of this side,
  /// row by row, followed by the whole image resized to one tile (the global view) when there is
  /// more than one tile. 0: no tiles (image_size is the tower's side).
  int64_t tile_size = 0;
  int64_t position_embeddings = 0;  ///< learned positions (Qwen3-VL's grid, SigLIP, CLIP)
  /// CLIP / SigLIP: the side of the learned position grid (the config's image_size /
  /// patch_size), which image_size may leave when set_image_size interpolates (LLaVA's CLIP or
  /// SigLIP tower).
  int64_t position_grid = 0;
  int64_t window_size = 0;                     ///< Qwen2.5-VL window attention (pixels)
  std::vector<int64_t> full_attention_blocks;  ///< Qwen2.5-VL
  std::vector<int64_t> deepstack_layers;       ///< Qwen3-VL
  int64_t feature_layer = -1;                  ///< LLaVA's vision_feature_layer
  bool keeps_cls = false;     ///< LLaVA's vision_feature_select_strategy "full" (CLS kept)
  double norm_eps = 1e-5;     ///< SigLIP / CLIP layer_norm_eps
  std::string hidden_act;     ///< SigLIP / CLIP vision_config.hidden_act (CLIP: "quick_gelu")
  std::string projector_act;  ///< LLaVA's projector_hidden_act ("gelu")
  int64_t image_token_id = -1;
  int64_t image_start_token_id = -1, image_end_token_id = -1;  ///< -1: none
  std::string source_dtype;                                    ///< torch_dtype / dtype

  /// The tower's input side: tile_size, or image_size without tiles.
  int64_t tower_size() const { return tile_size > 0 ? tile_size : image_size; }
  /// Calls of the tower per image: tiles and the global view (Idefics3), else 1.
  int64_t views() const;
  /// Tokens one view of the tower becomes in the LLM.
  int64_t tokens_per_view() const;
  /// Tokens one image of image_size x image_size becomes in the LLM (every view's).
  int64_t tokens_per_image() const { return views() * tokens_per_view(); }
  /// Weights of the tower and the projector (every tensor of the checkpoint's vision part).
  int64_t parameters() const;
};

/// The dynamic-resolution towers' image side for plan and compile defaults: a multiple of
/// 28 and 32 (Qwen2-VL's and Qwen3-VL's patch x merge), the size issue 26's benchmark uses.
inline constexpr int64_t kDefaultDynamicImageSize = 448;

/// Idefics3 / SmolVLM: tiles per side of the default image (the published processors'
/// size.longest_edge is 4 x max_image_size).
inline constexpr int64_t kIdefics3DefaultTiles = 4;
/// Idefics3 / SmolVLM: the processors' MAX_IMAGE_SIZE, the largest side an image is resized to.
inline constexpr int64_t kIdefics3MaxSide = 4096;

/// `c` planned or compiled at `side` x `side` pixels (the configuration key `key` names it in
/// errors; 0 keeps c.image_size): a dynamic-resolution Qwen tower takes any positive multiple
/// of patch_size x merge, LLaVA's CLIP or SigLIP tower any positive multiple of patch_size (its
/// learned positions interpolated bicubically, as HF's interpolate_pos_encoding, which LLaVA
/// itself never asks for: a qbc extension), Gemma 3's SigLIP only
/// its own image_size (its projector pools a grid fixed by the config), an Idefics3 tower any
/// positive multiple of its tile (the image cut into that many tiles per side and a global view:
/// the processor's size.longest_edge). kInvalidArgument for a
/// side the tower cannot take, kUnimplemented for another size of a fixed-size tower.
Status set_image_size(VisionConfig& c, int64_t side, std::string_view key);

/// The vision part of the config.json text `text` (`source` names it in errors); nullopt when
/// it has no vision_config. kUnimplemented naming model_type for a vision model of another family.
StatusOr<std::optional<VisionConfig>> parse_vision_config(std::string_view text,
                                                          const std::string& source);
StatusOr<std::optional<VisionConfig>> load_vision_config(const std::filesystem::path& config);

}  // namespace qbc::frontend
