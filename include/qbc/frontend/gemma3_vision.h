// Gemma 3's vision tower (SigLIP) and multimodal projector as their own MBLT graph
// (docs/multimodal.md, "Gemma 3"), following HF's SiglipVisionTransformer (last_hidden_state,
// so post_layernorm is applied) and Gemma3MultiModalProjector, for the config's fixed image size:
//
//   %patches [1, N, 3·p²] ─ patch_embed (linear, bias) ─ + %embed_base (position_embedding)
//   per layer:  x ─ layer_norm1 ─ q/k/v ─ full_attention ─ out_proj ─ + x
//               x ─ layer_norm2 ─ fc1 ─ gelu(tanh) ─ fc2 ─ + x
//   post_layernorm ─ avg_pool (k x k over the side x side grid) ─ rms_norm (1 + w)
//     ─ linear (mm_input_projection_weight, no bias) ─ %image_features [1, N/k², text_hidden]
//
// N = (image_size / patch)², rows in row-major grid order (no CLS row); k = vc.pool, from
// mm_tokens_per_image as HF computes it (patches per side / √tokens).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qbc/frontend/clip_vision.h"
#include "qbc/frontend/vision_config.h"
#include "qbc/ir/graph.h"
#include "qbc/support/status.h"

namespace qbc::frontend {

/// The vision parts the Gemma 3 graph builds: SigLIP with the soft-embedding projector.
inline bool builds_gemma3_vision_graph(const VisionConfig& vc) {
  return vc.tower == VisionTower::kSiglip && vc.projector == VisionProjector::kGemmaSoftEmb;
}

/// The checkpoint's name prefixes: transformers < 4.52 stores `vision_tower.vision_model.` and
/// `multi_modal_projector.`, >= 4.52 the same under `model.`.
struct Gemma3VisionNames {
  std::string tower = "vision_tower.vision_model.";
  std::string projector = "multi_modal_projector.";
};
Gemma3VisionNames gemma3_vision_names(bool transformers_4_52);

/// Patch rows for the `patches` input from CHW pixels [3, side, side] (Gemma3ImageProcessor):
/// one row per patch in row-major grid order, each (channel, y, x) as the Conv2d weight reads it.
std::vector<float> siglip_patch_rows(const std::vector<float>& chw, int64_t side, int64_t patch);

/// The graph of a gemma3 `vc` at vc.image_size. Inputs: patches f32[1, N, 3·p²], embed_base
/// f32[1, N, width] (the checkpoint's `embeddings.position_embedding.weight`, read by the
/// host); output image_features f32[1, N/pool², text_hidden]. The projector's weight is stored
/// [width, text_hidden] (HF multiplies by it); the graph's linear takes [text_hidden, width], so
/// a reader of this graph's weights transposes it (gemma3_read_vision_weight; the graph's
/// metadata `vision.transposed_weights` names it). kUnimplemented for another tower or activation.
StatusOr<ir::Graph> build_gemma3_vision_graph(const VisionConfig& vc,
                                              const Gemma3VisionNames& names = {});

/// Reads weight `w` of a Gemma 3 vision graph through `read` (by w.tensor), transposing the
/// projector's [width, text_hidden] tensor to the linear's [text_hidden, width].
Status gemma3_read_vision_weight(const TensorFloats& read, const ir::Weight& w,
                                 std::vector<float>* out);

}  // namespace qbc::frontend
