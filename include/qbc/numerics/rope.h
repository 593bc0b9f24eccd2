// The rotary embedding kernel: docs/numerics.md "rope" (fp16 cos/sin tables computed in
// fp64, the rotation in fp32, one rounding to fp16). Values are rows of floats ([s, n]
// row-major, batch 1) holding fp16 values.
#pragma once

#include <cstdint>
#include <vector>

namespace qbc::numerics {

/// A rope node's parameters (ir::rope_params reads them from the attributes).
struct Rope {
  int64_t heads = 0, head_dim = 0, rotary_dim = 0;
  std::vector<double> inv_freq, long_inv_freq;
  double attention_factor = 1.0, dynamic_factor = 0.0, theta = 10000.0;
  int64_t original_max_positions = 0;
  /// Frequencies for a call whose largest position is `max_pos` (LongRoPE / dynamic NTK
  /// switch exactly as the float runtime's RopeTable::frequencies).
  std::vector<double> frequencies(int64_t max_pos) const;
};

/// Rotates x[s, heads*head_dim] at positions first_pos.. with fp16 cos/sin tables, using
/// the frequencies of a call whose largest position is `freq_pos` (-1: first_pos + s - 1,
/// this call's own). A caller that splits one call into row tiles passes the whole call's
/// last position so every tile rotates as the whole call does.
void rope(const float* x, int64_t s, int64_t first_pos, const Rope& p, float* y,
          int64_t freq_pos = -1);

/// rope_table: rotate-half RoPE of x[s, heads*head_dim] with host tables cos, sin
/// [s, head_dim/2] (fp16 values, as the NPU's input buffers hold them): for each head and
/// i < head_dim/2, y_i = fp16(x_i · c_i − x_{i+h} · s_i), y_{i+h} = fp16(x_{i+h} · c_i + x_i · s_i)
/// in fp32, h = head_dim/2 (docs/numerics.md "rope_table").
void rope_table(const float* x, const float* cos, const float* sin, int64_t s, int64_t heads,
                int64_t head_dim, float* y);

}  // namespace qbc::numerics
