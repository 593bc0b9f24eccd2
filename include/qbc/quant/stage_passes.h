// The quant pipeline's fixed stages as passes: calibration (of the transformed float
// model for the scale migrations, and of the final model) and the quantization that
// turns the graph into the quantized one. Being passes, they are timed, verified,
// dumped and reported like every other step.
#pragma once

#include <memory>

#include "qbc/quant/pass.h"

namespace qbc::quant {

/// calibrateScales (`for_scales`) or calibrate: block-by-block activation statistics of
/// the current graph on the calibration samples (collect_stats_blockwise), into
/// ctx.owned_stats. Needs kCalibSamples; provides kScaleStats or kFinalStats. Changes nothing.
std::unique_ptr<Pass> make_calibrate(bool for_scales);

/// quantizeRtn: quantize_rtn() of the current graph with the final statistics and the
/// integers in ctx.fixed; the integer tensors go to ctx.sink and the graph becomes the
/// quantized one (counts in ctx.quantized_linears / float_linears). Needs kFinalStats, kTensorSink.
std::unique_ptr<Pass> make_quantize_rtn();

/// Tokens `stats` were collected on (per pass over the samples): the count of the first
/// per-channel statistic over its channels; 0 without one.
int64_t stats_tokens(const CalibStats& stats);

}  // namespace qbc::quant
