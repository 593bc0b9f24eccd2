// Test-sized random VLMs: the language model shrunk while the vision tower under test keeps
// the shape each test gives it (frontend::write_random_model from a real config).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "qbc/frontend/qwen_vision.h"
#include "qbc/frontend/random_model.h"

namespace qbc::testing {

/// The language model of a random VLM at test size: 1 layer, width 24 (the width the
/// projector writes), FFN 32, 2 heads over 1 KV head, a 64-token vocabulary (the image token
/// ids move to its top). Families that set head_dim (Gemma 3) set it too.
inline void shrink_language_model(frontend::ConfigOverrides& o) {
  o.num_hidden_layers = 1;
  o.hidden_size = 24;
  o.intermediate_size = 32;
  o.num_attention_heads = 2;
  o.num_key_value_heads = 1;
  o.vocab_size = 64;
}

/// A Qwen2.5-VL tower's inputs for a random image of `layout`'s grid: normalized pixel values
/// in [-1.8, 2.1] (the range of CLIP's mean/std normalisation), smoothed along each patch row so
/// neighbouring pixels correlate, in window order; then the layout's rope tables.
inline std::vector<std::vector<float>> qwen_random_image(const frontend::VisionConfig& vc,
                                                         const frontend::QwenVisionLayout& layout,
                                                         uint32_t seed) {
  const int64_t n = layout.grid.patches(), width = 3 * 2 * 14 * 14;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.8f, 2.1f);
  std::vector<float> rows(static_cast<size_t>(n * width));
  float prev = 0.0f;
  for (float& v : rows) {
    prev = 0.7f * prev + 0.3f * u(rng);
    v = prev;
  }
  return {frontend::qwen_window_rows(rows, width, vc.merge * vc.merge, layout.window_index,
                                     /*inverse=*/false),
          layout.cos, layout.sin};
}

}  // namespace qbc::testing
