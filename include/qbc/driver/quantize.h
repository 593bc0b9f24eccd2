// The quantize stage: calibrate a float graph and quantize it (qbc quantize).
#pragma once

#include <string>

#include "qbc/config/config.h"
#include "qbc/driver/model_loader.h"
#include "qbc/quant/calibrate.h"

namespace qbc::driver {

/// Calibration samples from the configuration: `calibDataPaths` (npy folders,
/// .txt lists, JSON maps) or `useRandomCalib`. `n` receives the sample count.
/// Fails (exit 2) before any work when no source is configured or a file is bad.
StatusOr<quant::SampleSource> calibration_source(const LoadedModel& model,
                                                 const config::ResolvedConfig& config, size_t* n);

/// Calibrates `model` and writes the quantized graph to `out_mblt` and its
/// integer weights to the sidecar beside it. Nothing is left behind on failure.
/// `threads`: compute threads of the float calibration runs (0 = all cores); the
/// output does not depend on it.
Status quantize_to(const LoadedModel& model, const config::ResolvedConfig& config,
                   const std::string& out_mblt, const std::string& producer, int threads = 0);

}  // namespace qbc::driver
