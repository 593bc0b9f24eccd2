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

}  // namespace qbc::quant
