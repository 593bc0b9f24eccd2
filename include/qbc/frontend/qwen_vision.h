// The Qwen2-VL, Qwen2.5-VL and Qwen3-VL vision towers as their own MBLT graph (docs/multimodal.md,
// "The vision graph"), and the host-side layout they run with: the window order of the patches,
// the window lengths, the 2-D rotary tables and (Qwen3-VL) the learned position grid
// interpolated to the image, all fixed by the image grid of a compile.
//
//   %patches [1, N, 3·tp·p²] ─ patch_embed (linear) ─┐           (rows in window order)
//   per block i:  x ─ norm1 ─ qkv ─ slice q/k/v ─ rope_table(q, k; %rope_cos, %rope_sin)
//                   ─ full_attention (whole image in fullatt blocks, else per window) ─ proj ─ + x
//     Qwen2.5-VL: x ─ norm2 ─ gate/up ─ gated_act(silu) ─ down ─ + x       (RMSNorms)
//     Qwen2-VL:   x ─ norm2 ─ fc1 ─ gelu(hidden_act) ─ fc2 ─ + x          (LayerNorms, bias)
//     Qwen3-VL:   x ─ norm2 ─ linear_fc1 ─ gelu(hidden_act) ─ linear_fc2 ─ + x (LayerNorms, bias)
//   merger:       ln_q ─ merge_rows(merge²) ─ mlp.0 ─ gelu ─ mlp.2 ─ %image_features [1, N/merge²,
//   out]
//
// Qwen3-VL adds its learned positions after the (biased) patch embedding: the host's %embed_base
// [1, N, width], the checkpoint's 48 x 48 (num_position_embeddings) grid interpolated bilinearly
// to the image's patch grid (qwen3_position_rows). After each block listed in
// deepstack_visual_indexes a DeepStack merger (merge_rows first, then a LayerNorm of the merged
// width, linear_fc1, GELU, linear_fc2) writes %deepstack_features.J [1, N/merge², out], the
// graph's outputs after %image_features; HF adds them to the hidden states of the language
// model's image tokens after its decoder layers 0, 1, 2.
//
// Qwen2.5-VL's graph works in window order, as HF's model does between its window_index gather
// and the final argsort: the host permutes the patch rows and the rope tables into that order
// (qwen_window_rows) and the output rows back (inverse = true). The permutation moves whole
// merge groups, so the merger's reshape sees each group's merge² rows together. Qwen2-VL has no
// windows (every block attends over the whole frame): its window order is the identity.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qbc/frontend/vision_config.h"
#include "qbc/ir/graph.h"
#include "qbc/support/status.h"

namespace qbc::frontend {

/// An image's patch grid: frames (after the temporal patch) x patch rows x patch columns.
struct VisionGrid {
  int64_t t = 1, h = 0, w = 0;
  int64_t patches() const { return t * h * w; }
};

/// What the host feeds a Qwen2(.5)-VL vision graph for one grid (HF's rot_pos_emb and, for
/// Qwen2.5-VL, get_window_index).
struct QwenVisionLayout {
  VisionGrid grid;
  /// Merge groups in window order: window_index[k] is the HF (row-major) group at position k.
  std::vector<int64_t> window_index;
  /// Tokens (patches) per window, in window order; they sum to grid.patches(). Empty for
  /// Qwen2-VL (no windows).
  std::vector<int64_t> window_tokens;
  /// cos / sin of the 2-D rotary angles, [patches, head_dim / 2] in window order: the first
  /// head_dim / 4 angles are row · inv_freq, the next head_dim / 4 column · inv_freq.
  std::vector<float> cos, sin;
};

/// The towers build_qwen_vision_graph builds: Qwen2-VL's, Qwen2.5-VL's and Qwen3-VL's.
inline bool builds_qwen_vision_graph(VisionTower t) {
  return t == VisionTower::kQwen2Vit || t == VisionTower::kQwen25Vit || t == VisionTower::kQwen3Vit;
}

/// The layout of `grid` for tower `vc` (kQwen25Vit, or kQwen2Vit: identity order, no windows).
/// kInvalidArgument when h or w is not a multiple of the merge size, head_dim is not a multiple
/// of 4, or a Qwen2.5-VL window is smaller than one merge group.
StatusOr<QwenVisionLayout> qwen_vision_layout(const VisionConfig& vc, const VisionGrid& grid);

/// Rows of `width` values permuted in groups of `group` rows: output group k is input group
/// order[k] (inverse = false), or output group order[k] is input group k (inverse = true).
std::vector<float> qwen_window_rows(const std::vector<float>& rows, int64_t width, int64_t group,
                                    const std::vector<int64_t>& order, bool inverse);

/// Qwen3-VL's learned positions for `grid` (HF's fast_pos_embed_interpolate), [patches, width]
/// in merge-group order: the `table` [num_position_embeddings, width] (a square grid of
/// `side`² rows) sampled bilinearly at linspace(0, side − 1, grid.h) x linspace(0, side − 1,
/// grid.w), evaluated in float64 and rounded once (HF computes in the checkpoint's dtype).
/// kInvalidArgument when the table is not a square grid of the tower's width.
StatusOr<std::vector<float>> qwen3_position_rows(const VisionConfig& vc, const VisionGrid& grid,
                                                 const std::vector<float>& table);

/// The vision graph of `vc` (kQwen2Vit, kQwen25Vit or kQwen3Vit) for `layout`'s grid. Weights
/// name the checkpoint's tensors (`visual.patch_embed.proj.weight` read as [width, 3·tp·p²],
/// `visual.blocks.N.*`, `visual.merger.*`, Qwen3-VL's `visual.deepstack_merger_list.J.*`).
/// Inputs: patches f32[1, N, 3·tp·p²], rope_cos and rope_sin f32[1, N, head_dim/2], Qwen3-VL's
/// embed_base f32[1, N, width]; outputs image_features f32[1, N / merge², text_hidden] and
/// Qwen3-VL's deepstack_features.J of the same type. kUnimplemented for another tower, naming it.
StatusOr<ir::Graph> build_qwen_vision_graph(const VisionConfig& vc, const QwenVisionLayout& layout);

}  // namespace qbc::frontend
