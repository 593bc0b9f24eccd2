// The equivalence transforms (docs/quantization.md): function-preserving rewrites of
// the float graph and weights that make weights and activations easier to quantize.
// Each is a Pass (qbc/quant/pass.h); this header makes them, and the quant pipeline
// (qbc/quant/pipeline.h) orders them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/quant/pass.h"

namespace qbc::quant {

/// normConv: folds every RMSNorm weight whose output only feeds linears into the
/// columns of those linears (W ← W·diag(γ + unit_offset)) and sets the norm to unit
/// gain. No mean subtraction (RMSNorm is not LayerNorm). Norms that also feed anything
/// else (Gemma's post-norms, QK-norms) are left alone.
std::unique_ptr<Pass> make_norm_conv();

/// spinR1: rotates the residual stream by a seeded random Hadamard R (hidden×hidden):
/// host embedding E ← E·R, every linear reading the stream (q/k/v/gate/up/lm_head)
/// W ← W·R, every linear writing it (o/down) W ← Rᵀ·W (and bias). Needs unit-gain norms
/// (normConv first); refuses graphs where a node touching the stream cannot absorb R.
std::unique_ptr<Pass> make_spin_r1(uint64_t seed);

/// spinR1Check: on calibration rows of the float model, the mean relative output error
/// of round-to-nearest weights (configured bits, groups, zero points) over the linears
/// normConv + spinR1 change (q/k/v, gate/up, o, down of every block), without and with
/// the rotation of `seed`; records in ctx.rotation whether the rotation lowers it.
/// Changes nothing. Needs kCalibSamples, provides kRotationVerdict.
std::unique_ptr<Pass> make_rotation_check(uint64_t seed);

/// `inner`, run only when ctx.rotation (the spinR1 check's verdict, kRotationVerdict)
/// says to rotate; otherwise the pass reports no change.
std::unique_ptr<Pass> gate_on_rotation(std::unique_ptr<Pass> inner);

/// spinR2: per layer, a seeded random Hadamard R2 (head_dim×head_dim) on each V head's
/// output rows (and bias) and the matching o_proj input columns of every query head.
std::unique_ptr<Pass> make_spin_r2(uint64_t seed);

/// qkRotation: per (KV head, channel pair), the 2-D rotation of the q_proj rows (of every
/// query head of the group) and k_proj rows (and biases) that commutes with RoPE, its
/// angle chosen from 16 in [0, π/2) to minimise the rows' round-to-nearest error at the
/// configured weight bits (0 included). QK-norm attention is left alone.
std::unique_ptr<Pass> make_qk_rotation();

/// optimizeFfn: accepted and documented as a no-op (a backend concern; see its file).
std::unique_ptr<Pass> make_optimize_ffn();

/// Scale migrations (need ctx.stats of the current graph; quant.md §3.7):
/// qk: Q·s, K/s per channel, s tied per rotary pair and per GQA group (and shared across
///     heads for QK-norm models, where it goes into the q_norm/k_norm gains);
/// vo: V rows / s, o_proj columns · s (s expanded over each GQA group);
/// ud: up rows / s, down columns · s, s = max|x|^α / max|W|^(1-α) (never gate).
std::unique_ptr<Pass> make_qk_scale();
std::unique_ptr<Pass> make_vo_scale();
std::unique_ptr<Pass> make_ud_scale(double alpha);

}  // namespace qbc::quant
