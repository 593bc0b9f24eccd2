// The normalization kernels: docs/numerics.md "rms_norm" and "layer_norm" (sums, the mean, the
// variance and the reciprocal square root in fp64, in index order, one rounding to fp16). Values
// are rows of floats ([s, n] row-major, batch 1).
#pragma once

#include <cstdint>
#include <vector>

namespace qbc::numerics {

/// RMSNorm over groups of `group` elements (0 = whole row), fp64 inside, fp16 out.
void rms_norm(const float* x, int64_t s, int64_t n, const std::vector<float>& w, double eps,
              double unit_offset, int64_t group, float* y);

/// LayerNorm of each row of `n` elements: mean and biased variance in fp64 (two passes, index
/// order), y = fp16((x − mean) · r · w + b) with r = 1 / sqrt(var + eps), fp64 inside;
/// `b` may be null (no bias). `w` and `b` hold `n` values.
void layer_norm(const float* x, int64_t s, int64_t n, const float* w, const float* b, double eps,
                float* y);

}  // namespace qbc::numerics
