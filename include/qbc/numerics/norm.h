// The normalization kernel: docs/numerics.md "rms_norm" (the sum of squares and the
// reciprocal square root in fp64, in index order, one rounding to fp16). Values are rows of
// floats ([s, n] row-major, batch 1).
#pragma once

#include <cstdint>
#include <vector>

namespace qbc::numerics {

/// RMSNorm over groups of `group` elements (0 = whole row), fp64 inside, fp16 out.
void rms_norm(const float* x, int64_t s, int64_t n, const std::vector<float>& w, double eps,
              double unit_offset, int64_t group, float* y);

}  // namespace qbc::numerics
