// fp16 rounding, the value format between ops: docs/numerics.md "Principles" 2 and 3 (one
// IEEE round-to-nearest-even rounding to fp16 at each op's output) and "Where values live,
// and why" (fp16 values on the vector unit, fp32 where the head leaves them unrounded).
#pragma once

namespace qbc::numerics {

/// Rounds `x` once, to nearest even, to the closest IEEE binary16 value (returned as
/// float; overflow gives ±infinity, NaN stays NaN). Rounds directly from fp64, so it
/// avoids the double rounding of fp64 -> fp32 -> fp16.
float round_fp16(double x);

/// fp16(v) when `fp16`, else v unchanged.
float maybe_fp16(float v, bool fp16);

}  // namespace qbc::numerics
