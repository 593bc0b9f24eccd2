// avg_pool: the mean of each k x k window of a row-major grid of rows (Gemma 3's
// multimodal projector pools SigLIP's 64 x 64 patch grid by 4; docs/numerics.md "avg_pool").
#pragma once

#include <cstdint>

namespace qbc::numerics {

/// x: [gh · gw, c] rows of a row-major grid gw wide; y: [(gh/k) · (gw/k), c]. Each output value
/// is the fp64 sum of its window's k² inputs (window rows top to bottom, each left to right)
/// divided by k², rounded to fp32 once, then to fp16 when `fp16`. k must divide gh and gw.
void avg_pool(const float* x, int64_t gh, int64_t gw, int64_t c, int64_t k, bool fp16, float* y);

}  // namespace qbc::numerics
