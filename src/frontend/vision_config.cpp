// config.json's vision part (qbc/frontend/vision_config.h). Key names and defaults follow the
// HF configuration classes (Qwen2VLVisionConfig, Qwen2_5_VLVisionConfig, Qwen3VLVisionConfig,
// SiglipVisionConfig, CLIPVisionConfig, Gemma3Config, LlavaConfig, Idefics3Config /
// Idefics3VisionConfig, SmolVLMConfig); the parameter counts the
// modules of the HF modeling code.
#include "qbc/frontend/vision_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "hparams_reader.h"
#include "qbc/support/json_parse.h"

namespace qbc::frontend {
namespace {

using hparams_internal::ConfigReader;

constexpr int64_t kMaxDim = int64_t{1} << 20;

int64_t linear(int64_t in, int64_t out, bool bias = true) { return in * out + (bias ? out : 0); }

StatusOr<std::vector<int64_t>> int_list(const ConfigReader& r, std::string_view key) {
  std::vector<int64_t> out;
  const nlohmann::json* v = r.find(key);
  if (v == nullptr) return out;
  if (!v->is_array()) return r.wrong_type(key, "a list of integers");
  for (const auto& e : *v) {
    if (!e.is_number_integer()) return r.wrong_type(key, "a list of integers");
    out.push_back(e.get<int64_t>());
  }
  return out;
}

int64_t token_or(const ConfigReader& r, std::string_view key, int64_t fallback) {
  const nlohmann::json* v = r.find(key);
  return v != nullptr && v->is_number_integer() ? v->get<int64_t>() : fallback;
}

StatusOr<int64_t> text_hidden(const ConfigReader& top, int64_t fallback) {
  if (!top.has("text_config")) return fallback;
  QBC_ASSIGN_OR_RETURN(const ConfigReader text, top.child("text_config"));
  return text.get_bounded_or("hidden_size", fallback, kMaxDim);
}

Status read_qwen(const ConfigReader& top, const ConfigReader& v, VisionConfig& c) {
  c.projector = VisionProjector::kQwenMerger;
  c.dynamic_resolution = true;
  c.image_size = kDefaultDynamicImageSize;
  // Qwen3VLVisionConfig's defaults differ from Qwen2(.5)-VL's: 27 blocks of patch 16.
  const bool qwen3 = c.model_type == "qwen3_vl";
  QBC_ASSIGN_OR_RETURN(c.depth, v.get_bounded_or("depth", qwen3 ? 27 : 32, 1024));
  QBC_ASSIGN_OR_RETURN(c.heads, v.get_bounded_or("num_heads", 16, 1024));
  QBC_ASSIGN_OR_RETURN(c.patch_size, v.get_bounded_or("patch_size", qwen3 ? 16 : 14, 1024));
  QBC_ASSIGN_OR_RETURN(c.temporal_patch_size, v.get_bounded_or("temporal_patch_size", 2, 64));
  QBC_ASSIGN_OR_RETURN(c.merge, v.get_bounded_or("spatial_merge_size", 2, 64));
  if (c.model_type == "qwen2_vl") {
    c.tower = VisionTower::kQwen2Vit;
    QBC_ASSIGN_OR_RETURN(c.width, v.get_bounded_or("embed_dim", 1280, kMaxDim));
    QBC_ASSIGN_OR_RETURN(const int64_t ratio, v.get_bounded_or("mlp_ratio", 4, 64));
    c.ffn = c.width * ratio;
    QBC_ASSIGN_OR_RETURN(c.text_hidden, v.get_bounded_or("hidden_size", 3584, kMaxDim));
    // Qwen2VLVisionConfig's default; the blocks' LayerNorms use eps 1e-6 (hard-coded in HF).
    QBC_ASSIGN_OR_RETURN(c.hidden_act, v.get_string_or("hidden_act", "quick_gelu"));
    if (c.hidden_act != "quick_gelu" && c.hidden_act != "gelu" &&
        c.hidden_act != "gelu_pytorch_tanh" && c.hidden_act != "gelu_new")
      return v.bad_value("hidden_act", "expected quick_gelu, gelu, gelu_pytorch_tanh or gelu_new");
    c.norm_eps = 1e-6;
  } else {
    c.tower = c.model_type == "qwen3_vl" ? VisionTower::kQwen3Vit : VisionTower::kQwen25Vit;
    const bool q3 = c.tower == VisionTower::kQwen3Vit;
    QBC_ASSIGN_OR_RETURN(c.width, v.get_bounded_or("hidden_size", q3 ? 1152 : 3584, kMaxDim));
    QBC_ASSIGN_OR_RETURN(c.ffn, v.get_bounded_or("intermediate_size", q3 ? 4304 : 3420, kMaxDim));
    QBC_ASSIGN_OR_RETURN(c.text_hidden, v.get_bounded_or("out_hidden_size", 3584, kMaxDim));
    QBC_ASSIGN_OR_RETURN(c.window_size, v.get_int_or("window_size", q3 ? 0 : 112));
    QBC_ASSIGN_OR_RETURN(c.full_attention_blocks, int_list(v, "fullatt_block_indexes"));
    QBC_ASSIGN_OR_RETURN(c.deepstack_layers, int_list(v, "deepstack_visual_indexes"));
    if (q3 && !v.has("deepstack_visual_indexes")) c.deepstack_layers = {8, 16, 24};  // HF's
    if (q3) {
      QBC_ASSIGN_OR_RETURN(c.position_embeddings,
                           v.get_bounded_or("num_position_embeddings", 2304, kMaxDim));
      // Qwen3VLVisionConfig's default; LayerNorms with eps 1e-6 (hard-coded in HF).
      QBC_ASSIGN_OR_RETURN(c.hidden_act, v.get_string_or("hidden_act", "gelu_pytorch_tanh"));
      if (c.hidden_act != "gelu_pytorch_tanh" && c.hidden_act != "gelu_new" &&
          c.hidden_act != "gelu" && c.hidden_act != "quick_gelu")
        return v.bad_value("hidden_act",
                           "expected gelu_pytorch_tanh, gelu_new, gelu or quick_gelu");
      c.norm_eps = 1e-6;
      const auto side =
          static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(c.position_embeddings))));
      if (side * side != c.position_embeddings)
        return v.bad_value("num_position_embeddings", "not a square grid");
      for (size_t i = 0; i < c.deepstack_layers.size(); ++i) {
        const int64_t layer = c.deepstack_layers[i];
        if (layer < 0 || layer >= c.depth)
          return v.bad_value("deepstack_visual_indexes", "names a block outside depth");
        if (i > 0 && layer <= c.deepstack_layers[i - 1])
          return v.bad_value("deepstack_visual_indexes", "not increasing");
      }
    }
  }
  c.image_token_id = token_or(top, "image_token_id", 151655);
  c.image_start_token_id = token_or(top, "vision_start_token_id", 151652);
  c.image_end_token_id = token_or(top, "vision_end_token_id", 151653);
  return ok_status();
}

// SigLIP and CLIP towers share their keys (SiglipVisionConfig / CLIPVisionConfig).
Status read_vit(const ConfigReader& v, int64_t default_image, VisionConfig& c) {
  QBC_ASSIGN_OR_RETURN(c.depth, v.get_bounded_or("num_hidden_layers", 12, 1024));
  QBC_ASSIGN_OR_RETURN(c.width, v.get_bounded_or("hidden_size", 768, kMaxDim));
  QBC_ASSIGN_OR_RETURN(c.ffn, v.get_bounded_or("intermediate_size", 3072, kMaxDim));
  QBC_ASSIGN_OR_RETURN(c.heads, v.get_bounded_or("num_attention_heads", 12, 1024));
  QBC_ASSIGN_OR_RETURN(c.patch_size, v.get_bounded_or("patch_size", 16, 1024));
  QBC_ASSIGN_OR_RETURN(c.image_size, v.get_bounded_or("image_size", default_image, 65536));
  // CLIPVisionConfig's default is 1e-5, SiglipVisionConfig's 1e-6.
  QBC_ASSIGN_OR_RETURN(
      c.norm_eps, v.get_double_or("layer_norm_eps", c.tower == VisionTower::kClip ? 1e-5 : 1e-6));
  QBC_ASSIGN_OR_RETURN(c.hidden_act, v.get_string_or("hidden_act", c.tower == VisionTower::kClip
                                                                       ? "quick_gelu"
                                                                       : "gelu_pytorch_tanh"));
  // HF's patch Conv2d is "valid": an image_size that is not a multiple of patch_size leaves its
  // last image_size % patch_size pixels unused (SigLIP-so400m/14 at 384: 27 x 27 patches).
  if (c.image_size < c.patch_size)
    return v.bad_value("image_size", "smaller than one patch (patch_size)");
  const int64_t side = c.image_size / c.patch_size;
  c.position_grid = side;
  c.position_embeddings = side * side + (c.tower == VisionTower::kClip ? 1 : 0);
  return ok_status();
}

Status read_gemma3(const ConfigReader& top, const ConfigReader& v, VisionConfig& c) {
  c.tower = VisionTower::kSiglip;
  c.projector = VisionProjector::kGemmaSoftEmb;
  QBC_RETURN_IF_ERROR(read_vit(v, 224, c));
  QBC_ASSIGN_OR_RETURN(const int64_t tokens,
                       top.get_bounded_or("mm_tokens_per_image", 256, kMaxDim));
  const int64_t side = c.image_size / c.patch_size;
  const auto per_side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(tokens))));
  if (per_side * per_side != tokens || side % per_side != 0) {
    return top.bad_value("mm_tokens_per_image",
                         "not a square dividing the patch grid of vision_config");
  }
  c.pool = side / per_side;
  QBC_ASSIGN_OR_RETURN(c.text_hidden, text_hidden(top, 2304));
  c.image_token_id = token_or(top, "image_token_index", 262144);
  c.image_start_token_id = token_or(top, "boi_token_index", 255999);
  c.image_end_token_id = token_or(top, "eoi_token_index", 256000);
  return ok_status();
}

Status read_llava(const ConfigReader& top, const ConfigReader& v, VisionConfig& c) {
  QBC_ASSIGN_OR_RETURN(const std::string tower, v.get_string_or("model_type", "clip_vision_model"));
  if (tower == "clip_vision_model") {
    c.tower = VisionTower::kClip;
  } else if (tower == "siglip_vision_model") {
    c.tower = VisionTower::kSiglip;
  } else {
    return unimplemented(v.where("model_type"), ": vision tower '", tower,
                         "' is not implemented (clip_vision_model, siglip_vision_model are)");
  }
  c.projector = VisionProjector::kLlavaMlp;
  QBC_RETURN_IF_ERROR(read_vit(v, 224, c));
  QBC_ASSIGN_OR_RETURN(c.feature_layer, top.get_int_or("vision_feature_layer", -2));
  QBC_ASSIGN_OR_RETURN(const std::string strategy,
                       top.get_string_or("vision_feature_select_strategy", "default"));
  if (strategy != "default" && strategy != "full") {
    return top.bad_value("vision_feature_select_strategy", "expected \"default\" or \"full\"");
  }
  c.keeps_cls = strategy == "full";
  QBC_ASSIGN_OR_RETURN(c.projector_act, top.get_string_or("projector_hidden_act", "gelu"));
  QBC_ASSIGN_OR_RETURN(c.text_hidden, text_hidden(top, 4096));
  c.image_token_id = token_or(top, "image_token_index", 32000);
  return ok_status();
}

// Idefics3 (SmolVLM v1) and SmolVLM (v2): a SigLIP-style tower (Idefics3VisionConfig /
// SmolVLMVisionConfig: defaults 12 blocks of 1152, FFN 3072, 16 heads, patch 32 at 224), the
// connector's pixel shuffle by scale_factor (default 2) and a linear without bias to the text
// width. The processor resizes an image to its size.longest_edge (4 x max_image_size in the
// published SmolVLM and Idefics3 processors), cuts it into tiles of the tower's side and adds
// the global view: image_size starts at 4 tiles per side (vision.imageSize changes it).
Status read_idefics3(const ConfigReader& top, const ConfigReader& v, VisionConfig& c) {
  c.tower = VisionTower::kSiglip;
  c.projector = VisionProjector::kPixelShuffle;
  QBC_ASSIGN_OR_RETURN(c.depth, v.get_bounded_or("num_hidden_layers", 12, 1024));
  QBC_ASSIGN_OR_RETURN(c.width, v.get_bounded_or("hidden_size", 1152, kMaxDim));
  QBC_ASSIGN_OR_RETURN(c.ffn, v.get_bounded_or("intermediate_size", 3072, kMaxDim));
  QBC_ASSIGN_OR_RETURN(c.heads, v.get_bounded_or("num_attention_heads", 16, 1024));
  QBC_ASSIGN_OR_RETURN(c.patch_size, v.get_bounded_or("patch_size", 32, 1024));
  // HF's Idefics3 processors cap an image's longest edge at MAX_IMAGE_SIZE = 4096.
  QBC_ASSIGN_OR_RETURN(c.tile_size, v.get_bounded_or("image_size", 224, kIdefics3MaxSide));
  QBC_ASSIGN_OR_RETURN(c.norm_eps, v.get_double_or("layer_norm_eps", 1e-6));
  QBC_ASSIGN_OR_RETURN(c.hidden_act, v.get_string_or("hidden_act", "gelu_pytorch_tanh"));
  // As for CLIP and SigLIP (read_vit): a tile that is not a multiple of the patch leaves its
  // last pixels unread (SmolVLM-Instruct: 384 / 14, 27 x 27 patches).
  if (c.tile_size < c.patch_size)
    return v.bad_value("image_size", "smaller than one patch (patch_size)");
  QBC_ASSIGN_OR_RETURN(c.merge, top.get_bounded_or("scale_factor", 2, 64));
  if (c.merge < 1) return top.bad_value("scale_factor", "must be at least 1");
  const int64_t side = c.tile_size / c.patch_size;
  if (side % c.merge != 0)
    return top.bad_value("scale_factor",
                         "does not divide the tower's patch grid (vision_config "
                         "image_size / patch_size)");
  c.position_grid = side;
  c.position_embeddings = side * side;
  c.image_size = kIdefics3DefaultTiles * c.tile_size;
  while (c.image_size > kIdefics3MaxSide) c.image_size -= c.tile_size;
  QBC_ASSIGN_OR_RETURN(c.text_hidden, text_hidden(top, 4096));
  c.image_token_id = token_or(top, "image_token_id", 128257);
  return ok_status();
}

// LayerNorm x2, attention q, k, v, out (or fused qkv + proj: the same count), fc1, fc2.
int64_t vit_block(int64_t w, int64_t ffn) {
  return 4 * w + 4 * linear(w, w) + linear(w, ffn) + linear(ffn, w);
}

int64_t qwen_merger(const VisionConfig& c, int64_t norm_width, int64_t norm_tensors) {
  const int64_t m = c.merge * c.merge * c.width;
  return norm_tensors * norm_width + linear(m, m) + linear(m, c.text_hidden);
}

}  // namespace

std::string_view vision_tower_name(VisionTower t) {
  switch (t) {
    case VisionTower::kQwen2Vit:
      return "Qwen2-VL ViT";
    case VisionTower::kQwen25Vit:
      return "Qwen2.5-VL ViT";
    case VisionTower::kQwen3Vit:
      return "Qwen3-VL ViT";
    case VisionTower::kSiglip:
      return "SigLIP";
    case VisionTower::kClip:
      return "CLIP ViT";
  }
  return "?";
}

std::string_view vision_projector_name(VisionProjector p) {
  switch (p) {
    case VisionProjector::kQwenMerger:
      return "patch merger";
    case VisionProjector::kGemmaSoftEmb:
      return "average pool + RMSNorm + linear";
    case VisionProjector::kLlavaMlp:
      return "2-layer MLP (GELU)";
    case VisionProjector::kPixelShuffle:
      return "pixel shuffle + linear";
  }
  return "?";
}

int64_t VisionConfig::views() const {
  if (tile_size <= 0 || image_size <= tile_size) return 1;
  const int64_t per_side = image_size / tile_size;
  return per_side * per_side + 1;
}

int64_t VisionConfig::tokens_per_view() const {
  const int64_t side = tower_size() / patch_size;
  switch (projector) {
    case VisionProjector::kQwenMerger:
    case VisionProjector::kPixelShuffle:
      return (side / merge) * (side / merge);
    case VisionProjector::kGemmaSoftEmb:
      return (side / pool) * (side / pool);
    case VisionProjector::kLlavaMlp:  // CLIP's CLS row first; "default" drops row 0
      return side * side + (tower == VisionTower::kClip ? 1 : 0) - (keeps_cls ? 0 : 1);
  }
  return 0;
}

int64_t VisionConfig::parameters() const {
  const int64_t w = width, patch_in = 3 * temporal_patch_size * patch_size * patch_size;
  switch (tower) {
    case VisionTower::kQwen2Vit:  // LayerNorm x2, qkv, proj, fc1, fc2; merger ln_q LayerNorm
      return patch_in * w + depth * vit_block(w, ffn) + qwen_merger(*this, w, 2);
    case VisionTower::kQwen25Vit:  // RMSNorm x2, qkv, proj, gate, up, down; ln_q RMSNorm
      return patch_in * w +
             depth *
                 (2 * w + linear(w, 3 * w) + linear(w, w) + 2 * linear(w, ffn) + linear(ffn, w)) +
             qwen_merger(*this, w, 1);
    case VisionTower::kQwen3Vit: {  // patch conv with bias, position grid, LayerNorm blocks
      int64_t n = patch_in * w + w + position_embeddings * w + depth * vit_block(w, ffn) +
                  qwen_merger(*this, w, 2);
      const int64_t m = merge * merge * w;
      for (size_t i = 0; i < deepstack_layers.size(); ++i) n += qwen_merger(*this, m, 2);
      return n;
    }
    case VisionTower::kSiglip:
    case VisionTower::kClip: {
      const int64_t pin = 3 * patch_size * patch_size;
      int64_t n = depth * vit_block(w, ffn) + position_embeddings * w + 2 * w;    // post LN
      n += tower == VisionTower::kSiglip ? linear(pin, w) : pin * w + w + 2 * w;  // CLS, pre LN
      if (projector == VisionProjector::kGemmaSoftEmb) n += w * text_hidden + w;
      if (projector == VisionProjector::kLlavaMlp)
        n += linear(w, text_hidden) + linear(text_hidden, text_hidden);
      if (projector == VisionProjector::kPixelShuffle)
        n += linear(merge * merge * w, text_hidden, false);
      return n;
    }
  }
  return 0;
}

Status set_image_size(VisionConfig& c, int64_t side, std::string_view key) {
  if (side == 0 || side == c.image_size) return ok_status();
  if (c.tile_size > 0) {  // Idefics3: whole tiles per side, within HF's MAX_IMAGE_SIZE
    if (side > kIdefics3MaxSide)
      return invalid_argument(key, " ", side, ": the ", c.model_type,
                              " processor resizes an image to at most ", kIdefics3MaxSide,
                              " pixels a side (MAX_IMAGE_SIZE)");
    if (side < c.tile_size || side % c.tile_size != 0) {
      const int64_t below = std::max(c.tile_size, side / c.tile_size * c.tile_size);
      return invalid_argument(key, " ", side, ": the ", c.model_type,
                              " processor cuts images into tiles of ", c.tile_size,
                              " pixels (vision_config.image_size); give a multiple (e.g. ", below,
                              " or ", below + c.tile_size, ")");
    }
    c.image_size = side;
    return ok_status();
  }
  // LLaVA's CLIP or SigLIP tower: the learned positions resampled (clip_embed_base).
  if (!c.dynamic_resolution &&
      (c.tower == VisionTower::kClip || c.projector == VisionProjector::kLlavaMlp)) {
    if (side < c.patch_size || side % c.patch_size != 0) {
      const int64_t below = std::max(c.patch_size, side / c.patch_size * c.patch_size);
      return invalid_argument(key, " ", side, ": the ", vision_tower_name(c.tower),
                              " tower takes multiples of patch_size = ", c.patch_size,
                              " pixels (e.g. ", below, " or ", below + c.patch_size, ")");
    }
    c.image_size = side;  // the position grid is interpolated (position_grid keeps the table's)
    return ok_status();
  }
  if (!c.dynamic_resolution) {
    const char* why = c.projector == VisionProjector::kGemmaSoftEmb
                          ? " (its projector pools the patch grid of that size to "
                            "mm_tokens_per_image, and the processor resizes every image to it)"
                          : " (its learned positions are not interpolated for this tower yet)";
    return unimplemented(key, " ", side, ": the ", vision_tower_name(c.tower), " tower of ",
                         c.model_type, " takes ", c.image_size, "x", c.image_size, " only", why,
                         "; leave ", key, " at 0 or set it to ", c.image_size);
  }
  const int64_t unit = c.patch_size * c.merge;
  if (side < unit || side % unit != 0) {
    const int64_t below = std::max(unit, side / unit * unit);
    return invalid_argument(key, " ", side, ": the ", vision_tower_name(c.tower),
                            " tower takes multiples of patch_size x spatial_merge_size = ", unit,
                            " pixels (e.g. ", below, " or ", below + unit, ")");
  }
  c.image_size = side;
  return ok_status();
}

StatusOr<std::optional<VisionConfig>> parse_vision_config(std::string_view text,
                                                          const std::string& source) {
  QBC_ASSIGN_OR_RETURN(const nlohmann::json j, parse_json_text(text, source));
  if (!j.is_object()) return invalid_argument(source, ": expected a JSON object");
  const ConfigReader top(j, source);
  if (!top.has("vision_config")) return std::optional<VisionConfig>();
  QBC_ASSIGN_OR_RETURN(const ConfigReader v, top.child("vision_config"));
  VisionConfig c;
  QBC_ASSIGN_OR_RETURN(c.model_type, top.get_string_or("model_type", ""));
  QBC_ASSIGN_OR_RETURN(c.source_dtype, top.get_string_or("torch_dtype", "bfloat16"));
  if (top.has("dtype")) {
    QBC_ASSIGN_OR_RETURN(c.source_dtype, top.get_string_or("dtype", ""));
  }
  Status st;
  if (c.model_type == "qwen2_vl" || c.model_type == "qwen2_5_vl" || c.model_type == "qwen3_vl") {
    st = read_qwen(top, v, c);
  } else if (c.model_type == "gemma3") {
    st = read_gemma3(top, v, c);
  } else if (c.model_type == "llava") {
    st = read_llava(top, v, c);
  } else if (c.model_type == "idefics3" || c.model_type == "smolvlm") {
    st = read_idefics3(top, v, c);
  } else {
    return unimplemented(top.where("model_type"), ": the vision part of '", c.model_type,
                         "' is not read yet (qwen2_vl, qwen2_5_vl, qwen3_vl, gemma3, llava, "
                         "idefics3 and smolvlm are)");
  }
  QBC_RETURN_IF_ERROR(st);
  if (c.width % c.heads != 0) return v.bad_value("num_heads", "does not divide the width");
  // Qwen's towers take whole patches; CLIP and SigLIP convolve "valid" (a remainder of pixels
  // is not read), so their patch grid must split into merge groups.
  if (c.dynamic_resolution ? c.tower_size() % (c.patch_size * c.merge) != 0
                           : (c.tower_size() / c.patch_size) % c.merge != 0)
    return v.bad_value("patch_size", "the image side is not a multiple of patch x merge");
  return std::optional<VisionConfig>(std::move(c));
}

StatusOr<std::optional<VisionConfig>> load_vision_config(const std::filesystem::path& config) {
  std::ifstream in(config, std::ios::binary);
  if (!in) return not_found(config.string(), ": cannot open config file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_vision_config(ss.str(), config.string());
}

}  // namespace qbc::frontend
