// LLaVA-1.5's CLIP vision tower and multimodal projector as their own MBLT graph
// (docs/multimodal.md, "The vision graph (LLaVA-1.5, CLIP)"), and the host-side inputs it runs
// with, all fixed by the image size of a compile (HF's CLIPVisionModel +
// LlavaMultiModalProjector):
//
//   %patches [1, 1+N, 3·p²] ─ patch_embed (linear, no bias) ─ + %embed_base ─ pre_layrnorm
//     (row 0 is zeros: the CLS slot)            (class_embedding on row 0 + position_embedding)
//   per layer i < used_layers:  x ─ layer_norm1 ─ q/k/v ─ full_attention ─ out_proj ─ + x
//                               x ─ layer_norm2 ─ fc1 ─ gelu(quick) ─ fc2 ─ + x
//   projector:  linear_1 ─ gelu (erf) ─ linear_2 ─ %image_features [1, 1+N, text_hidden]
//
// The layers past vision_feature_layer are not built (HF computes them and drops them). The
// projector runs on the CLS row too; with vision_feature_select_strategy "default" the host
// drops output row 0 (clip_drop_cls), which equals HF's dropping it before the projector, as
// the projector works row by row. post_layernorm is not used by LLaVA and not built.
//
// A LLaVA model with a SigLIP tower (llava-interleave, LLaVA-OneVision's tower without AnyRes:
// vision_config.model_type siglip_vision_model) is built by the same code with SigLIP's
// embeddings: no CLS row (N rows), the patch embedding with bias, the position table alone as
// embed_base, no pre-norm; the encoder layers are the same (vit_layers.h) and HF takes
// hidden_states[vision_feature_layer] before post_layernorm as for CLIP. "default" drops output
// row 0 there too (HF's `[:, 1:]` does not know the tower has no CLS row).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qbc/frontend/vision_config.h"
#include "qbc/ir/graph.h"
#include "qbc/support/status.h"

namespace qbc::frontend {

/// The encoder layers the features come from: vision_feature_layer f < 0 uses depth + 1 + f
/// layers (HF's hidden_states[f], hidden_states[0] being the pre_layrnorm output), f >= 0 uses f.
/// kInvalidArgument when that is outside [0, depth].
StatusOr<int64_t> clip_used_layers(const VisionConfig& vc);

/// The vision parts build_clip_vision_graph builds: a CLIP or SigLIP tower with LLaVA's MLP
/// projector.
inline bool builds_clip_vision_graph(const VisionConfig& vc) {
  return (vc.tower == VisionTower::kClip || vc.tower == VisionTower::kSiglip) &&
         vc.projector == VisionProjector::kLlavaMlp;
}

/// The rows the tower computes per image: 1 + N for CLIP (the CLS slot first), N for SigLIP.
inline int64_t llava_tower_rows(const VisionConfig& vc) {
  const int64_t side = vc.image_size / vc.patch_size;
  return side * side + (vc.tower == VisionTower::kClip ? 1 : 0);
}

/// Patch rows for the graph's `patches` input from CHW pixels [3, side, side] (image::preprocess
/// of a CLIPImageProcessor): row 0 zeros (the CLS slot), then one row per patch in row-major grid
/// order, each (channel, y, x) as the Conv2d weight [width, 3, p, p] reads it.
std::vector<float> clip_patch_rows(const std::vector<float>& chw, int64_t side, int64_t patch);

/// Reads a checkpoint tensor by name as float32.
using TensorFloats = std::function<Status(const std::string& name, std::vector<float>* out)>;

/// The `embed_base` input: CLIP's [1 + N, width], `...embeddings.position_embedding.weight` with
/// `...embeddings.class_embedding` added to row 0 (fp32, as HF adds them); SigLIP's [N, width],
/// the position table alone. At an image size other than the table's (vc.position_grid), the
/// patch rows resampled bicubically to the image's grid first (bicubic_position_rows), the class
/// row kept.
StatusOr<std::vector<float>> clip_embed_base(const VisionConfig& vc, const TensorFloats& read);

/// Output rows [1 + N, c] without the CLS row when the config drops it (strategy "default").
std::vector<float> clip_drop_cls(const VisionConfig& vc, const std::vector<float>& rows, int64_t c);

/// The vision graph of a LLaVA `vc` (CLIP or SigLIP tower, MLP projector) at vc.image_size.
/// Weights name the checkpoint's tensors under transformers < 4.52 (`vision_tower.vision_model.*`,
/// `multi_modal_projector.*`). Inputs: patches f32[1, R, 3·p²], embed_base f32[1, R, width];
/// output image_features f32[1, R, text_hidden], R = llava_tower_rows (1 + N for CLIP, N for
/// SigLIP). kUnimplemented for another tower or an activation other than quick_gelu, gelu,
/// gelu_pytorch_tanh and gelu_new.
StatusOr<ir::Graph> build_clip_vision_graph(const VisionConfig& vc);

}  // namespace qbc::frontend
