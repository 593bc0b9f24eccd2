// normSmooth: SmoothQuant (quant.md §4) on the linears that read an RMSNorm.
#pragma once

#include <memory>

#include "qbc/quant/pass.h"

namespace qbc::quant {

/// For every rms_norm over the whole last dim whose output only feeds linears
/// (attn_norm → q/k/v or qkv, ffn_norm → gate/up or gate_up, output_norm → lm_head):
/// one s per input channel shared by all of those linears,
///   s_j = max|X_j|^α / max|W[:, j]|^(1−α)   (max over every row of every reader),
/// X = the norm's output (ctx.stats, required); gain (w + unit_offset) ← (w + unit_offset) / s,
/// reader columns ← W[:, j]·s_j. A zero or non-finite maximum leaves the channel alone
/// (s = 1); otherwise s is kept in [1e-5, 1e5]. Norms that feed anything else (Gemma's
/// post-norms, QK-norms) are left alone. fp64, rounded to fp32 once. Returns whether
/// anything changed.
std::unique_ptr<Pass> make_norm_smooth(double alpha);

}  // namespace qbc::quant
