// Position-robust ranges of the rotated keys stored in a quantized KV cache.
#pragma once

#include <cstdint>
#include <vector>

#include "qbc/ir/graph.h"
#include "qbc/quant/calibrate.h"

namespace qbc::quant {

/// A channel's value range [lo, hi].
struct ChannelRange {
  double lo = 0.0, hi = 0.0;
};

/// Ranges of the keys after the `rope` node `rope` at every position in [0, positions),
/// from calibration statistics of the rope's *input* (per-channel min/max).
///
/// Calibration sees positions up to its sequence length only, but RoPE turns each
/// rotary pair (a, b) by the position's angle, so a post-RoPE range measured there is
/// wrong for later positions (a low-frequency pair keeps a large offset for a while and
/// then swings it around). Instead: the pre-RoPE pair lies in the box centre (ma, mb) ±
/// (ha, hb); rotated by phi with cos/sin scaled by the attention factor f it lies in
/// R(phi)·centre ± (f|cos phi|·ha + f|sin phi|·hb, f|sin phi|·ha + f|cos phi|·hb), and the
/// range is the union of that over every angle the pair reaches (all angles once the
/// arc passes 2·pi; 4096 sampled angles, endpoints included, otherwise). Channels past
/// rotary_dim keep their pre-RoPE range.
std::vector<ChannelRange> rotated_key_ranges(const ir::Node& rope, const TensorStats& pre_rope,
                                             int64_t positions);

/// Rotating key offsets (docs/numerics.md, attention attribute k_rot_offset): a rotary
/// pair whose keys sit far from 0 before RoPE (a large centre m, a small spread) sweeps a
/// circle of radius |m| after it, which a static scale must cover. Storing k − rope(m)
/// instead, and adding q·rope(m) to the score, leaves only the spread to quantize.
struct RotatingKeyOffsets {
  std::vector<double> m;             ///< Pre-RoPE offset per channel (0 where unused).
  std::vector<ChannelRange> ranges;  ///< Ranges of the stored keys at every position.
  int64_t pairs = 0;                 ///< Rotary pairs that use their offset.
};

/// For each rotary pair of `rope`'s output: m = the centre of its pre-RoPE box, and the
/// pair uses it when the reach it must quantize (the largest |x − c| over the pair's two
/// channels, c = each range's midpoint when `centered`, else 0) shrinks to at most
/// `gain` times the reach of rotated_key_ranges(). Other channels keep those ranges.
RotatingKeyOffsets rotating_key_offsets(const ir::Node& rope, const TensorStats& pre_rope, int64_t positions,
                                        bool centered, double gain = 0.75);

}  // namespace qbc::quant
