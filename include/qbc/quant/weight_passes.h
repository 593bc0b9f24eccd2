// Passes that choose the integer weights themselves (docs/quantization.md). They run
// after the equivalence transforms and before the final calibration, block by block
// over the calibration set (BlockRunner), and need kCalibSamples and kFixedWeights.
#pragma once

#include <memory>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/quant/pass.h"

namespace qbc::quant {

/// searchWeightScale (AWQ-style): for each enabled projection group (query/key/value
/// share their input, out, ffn), a per-input-channel scale s = mean|x|^α searched over a
/// grid of α, folded into the producer of the input (norm gain, v rows, up rows) and the
/// weight columns, minimising the block output error of the quantized weights; then a
/// per-row clip ratio search on the output error. Records the chosen integers in
/// ctx.fixed and rewrites the float weights.
std::unique_ptr<Pass> make_search_weight_scale(const config::SearchWeightScaleConfig& config);

/// hessianQuant (GPTQ): per block, in true sequential order (q/k/v, o, gate/up, down),
/// Hessians from the inputs those linears see with the earlier ones already quantized;
/// GPTQ with act-order, static groups, blockSize and percDamp with retry. Records the
/// integers in ctx.fixed and writes the dequantized weights to ctx.weights, so later
/// blocks and the final calibration see the quantized model.
std::unique_ptr<Pass> make_hessian_quant(const config::HessianQuantConfig& config);

/// phaseImages (bit.prefill / bit.decode): the round-to-nearest integers of each second
/// weight image (quant::second_image) from the float weights, into ctx.second_images_chosen,
/// before hessianQuant replaces those weights (src/quant/phase_images.cpp).
std::unique_ptr<Pass> make_phase_images();

}  // namespace qbc::quant
