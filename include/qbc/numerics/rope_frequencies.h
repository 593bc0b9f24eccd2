// The frequency schedule of a `rope` node (docs/ir.md), shared by every runtime
// that executes MBLT so the LongRoPE and dynamic-NTK switches agree exactly: the
// frequencies f_i of docs/numerics.md "rope".
#pragma once

#include <cstdint>
#include <vector>

namespace qbc::numerics {

/// Inverse frequencies in effect for a call whose largest position is `max_pos`:
/// `long_inv_freq` once max_pos + 1 exceeds `original_max_positions` (LongRoPE),
/// dynamic-NTK frequencies from a grown base when `dynamic_factor` > 0, else `inv_freq`.
std::vector<double> rope_frequencies(const std::vector<double>& inv_freq,
                                     const std::vector<double>& long_inv_freq,
                                     double dynamic_factor, int64_t original_max_positions,
                                     double theta, int64_t rotary_dim, int64_t max_pos);

}  // namespace qbc::numerics
