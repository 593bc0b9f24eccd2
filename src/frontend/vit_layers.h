// The pre-norm ViT encoder stack that CLIP (LLaVA) and SigLIP (Gemma 3) towers share, private to
// the frontend: HF's CLIPEncoderLayer and SiglipEncoderLayer are the same equations with the
// same tensor names under the tower's prefix,
//   h = x + out_proj(attention(q_proj(ln1(x)), k_proj(ln1(x)), v_proj(ln1(x))))
//   y = h + fc2(act(fc1(ln2(h))))
// with biased linears, LayerNorm with bias, bidirectional attention scaled by 1/sqrt(head_dim),
// and the activation named by vision_config.hidden_act. Each tower builds its own embeddings and
// head around it.
#pragma once

#include <cstdint>
#include <string>

#include "qbc/frontend/vision_config.h"
#include "qbc/ir/builder.h"

namespace qbc::frontend {

class VitLayers {
 public:
  /// `tower`: the checkpoint prefix of the tower ("vision_tower.vision_model." or with "model.").
  VitLayers(const VisionConfig& vc, std::string tower, ir::Builder& b);

  /// Layers 0..count-1 from `x`, each in its own block (block ids 0..count-1); leaves the
  /// builder outside any block.
  StatusOr<ir::ValueId> layers(ir::ValueId x, int64_t count);

  /// LayerNorm of the tower's width with weight and bias `hf`.weight / `hf`.bias.
  StatusOr<ir::ValueId> norm(const std::string& name, ir::ValueId x, const std::string& hf);

  /// Linear [out, in] with weight `hf`.weight and, when `bias`, `hf`.bias.
  StatusOr<ir::ValueId> linear(const std::string& name, ir::ValueId x, const std::string& hf,
                               int64_t out, int64_t in, bool bias);

 private:
  StatusOr<ir::ValueId> layer(int64_t i, ir::ValueId x);

  const VisionConfig& vc_;
  std::string tower_;
  ir::Builder& b_;
  int64_t head_dim_;
};

/// The checks a SigLIP / CLIP-style tower's config must pass before its graph is built: an
/// activation vit_gelu_approx knows (kUnimplemented naming vision_config.hidden_act), heads
/// dividing the width, positive widths, and a patch grid of the tower's side that `group` (the
/// pool or pixel-shuffle factor, `group_key` in the message) divides (kInvalidArgument).
Status check_vit_tower(const VisionConfig& vc, int64_t group, const char* group_key);

/// The gelu `approx` attribute for a transformers ACT2FN name: "gelu" is the erf GELU (""),
/// "quick_gelu" is x·σ(1.702x) ("quick"), gelu_pytorch_tanh and gelu_new the tanh form ("tanh").
std::string vit_gelu_approx(const std::string& hidden_act);

}  // namespace qbc::frontend
