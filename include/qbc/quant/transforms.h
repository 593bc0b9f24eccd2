// The equivalence transforms (docs/quantization.md): function-preserving rewrites of
// the float graph and weights that make weights and activations easier to quantize.
// Each is a Pass (qbc/quant/pass.h); this header makes them and orders them.
#pragma once

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

/// The transforms `options` enables that run before calibration, in pipeline order
/// (normConv, spinR1, spinR2). Unbuilt transforms are refused with kUnimplemented.
StatusOr<std::vector<std::unique_ptr<Pass>>> pre_calibration_transforms(const config::CompileOptions& options);

}  // namespace qbc::quant
