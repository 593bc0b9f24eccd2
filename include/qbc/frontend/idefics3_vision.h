// The Idefics3 / SmolVLM vision tower (SigLIP) and connector as their own MBLT graph
// (docs/multimodal.md, "Idefics3 and SmolVLM"), following HF's Idefics3VisionTransformer
// (embeddings, encoder, post_layernorm) and Idefics3Connector (pixel_shuffle by scale_factor s,
// then modality_projection.proj, a linear without bias), for one tile of the tower's side:
//
//   %patches [1, N, 3·p²] ─ patch_embed (linear, bias) ─ + %embed_base (position_embedding)
//   per layer:  x ─ layer_norm1 ─ q/k/v ─ full_attention ─ out_proj ─ + x
//               x ─ layer_norm2 ─ fc1 ─ gelu(tanh) ─ fc2 ─ + x
//   post_layernorm ─ merge_rows (s² rows side by side) ─ linear (proj, no bias)
//     ─ %image_features [1, N/s², text_hidden]
//
// N = (tile / patch)². HF's pixel_shuffle gives output token (Y, X) of the (side/s)² grid the
// features of patches (Y·s + dy, X·s + dx) in (dy, dx) row-major order, each its full width;
// the graph takes its patch rows already in that order (image::shuffle_group_rows: the s² patches
// of a token consecutive, tokens row-major) with the position rows permuted alike, so the shuffle
// is merge_rows. The encoder attends bidirectionally over the whole tile, so the order of its rows
// changes nothing but the order of the attention's sums.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qbc/frontend/clip_vision.h"
#include "qbc/frontend/vision_config.h"
#include "qbc/ir/graph.h"
#include "qbc/support/status.h"

namespace qbc::frontend {

/// The vision parts this graph builds: SigLIP with the pixel-shuffle connector.
inline bool builds_idefics3_vision_graph(const VisionConfig& vc) {
  return vc.tower == VisionTower::kSiglip && vc.projector == VisionProjector::kPixelShuffle;
}

/// The checkpoint's name prefixes (Idefics3ForConditionalGeneration and
/// SmolVLMForConditionalGeneration store both under `model.`).
struct Idefics3VisionNames {
  std::string tower = "model.vision_model.";
  std::string connector = "model.connector.";
};

/// The `patches` input of one tile: CHW pixels [3, side, side] cut into patch rows (each
/// (channel, y, x) as the Conv2d weight reads it), in pixel-shuffle group order.
std::vector<float> idefics3_patch_rows(const std::vector<float>& chw, int64_t side, int64_t patch,
                                       int64_t scale);

/// The `embed_base` input: the checkpoint's `embeddings.position_embedding.weight` [grid²,
/// width] (position ids 0..N-1 for a whole tile) in pixel-shuffle group order.
StatusOr<std::vector<float>> idefics3_embed_base(const VisionConfig& vc, const TensorFloats& read,
                                                 const Idefics3VisionNames& names = {});

/// The graph of one tile of an idefics3 / smolvlm `vc` (vc.tower_size()). Inputs: patches
/// f32[1, N, 3·p²], embed_base f32[1, N, width]; output image_features f32[1, N/s², text_hidden].
/// kUnimplemented for another tower or activation.
StatusOr<ir::Graph> build_idefics3_vision_graph(const VisionConfig& vc,
                                                const Idefics3VisionNames& names = {});

}  // namespace qbc::frontend
