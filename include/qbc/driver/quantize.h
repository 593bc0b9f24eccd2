// The quantize stage: calibrate a float graph and quantize it (qbc quantize).
#pragma once

#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/driver/model_loader.h"
#include "qbc/driver/source_types.h"
#include "qbc/pass/pass_manager.h"
#include "qbc/pass/pipeline.h"
#include "qbc/quant/calibrate.h"
#include "qbc/quant/checkpoint.h"

namespace qbc::driver {

/// Calibration samples from the configuration: `calibDataPaths` (npy folders,
/// .txt lists, JSON maps) or `useRandomCalib`. `n` receives the sample count, and `deepstack`
/// (when given) the samples' DeepStack rows: set for a graph with DeepStack inputs whose
/// samples carry them (`calib prepare --images` of a Qwen3-VL folder), else left empty.
/// Fails (exit 2) before any work when no source is configured or a file is bad.
StatusOr<quant::SampleSource> calibration_source(const LoadedModel& model,
                                                 const config::ResolvedConfig& config, size_t* n,
                                                 quant::DeepStackSource* deepstack = nullptr);

/// The calibration source of the configuration, checked before the model is opened: one
/// of calibDataPaths (--calib) and useRandomCalib is given, and every path exists. The files
/// themselves are checked against the model by calibration_source().
Status check_calibration_inputs(const config::ResolvedConfig& config);

/// How one quantize run is carried out; none of it changes the output.
struct QuantizeRun {
  std::string producer;  ///< Recorded in the outputs' metadata.
  /// Compute threads of the float calibration runs (0 = all cores).
  int threads = 0;
  /// --disable-pass, --dump-after, --dump-dir.
  pass::Instrumentation instrumentation;
  /// Where calibration checkpoints its finished blocks and resumes (null: nowhere).
  const quant::CheckpointDir* checkpoints = nullptr;
};

/// What a quantize run wrote and did, for the command's summary line.
struct QuantizeSummary {
  std::string mblt, sidecar;
  int64_t mblt_bytes = 0, sidecar_bytes = 0;
  int quantized_linears = 0, float_linears = 0;
  /// "30 with their own 8-bit prefill image (bit.prefill.weight)": the linears with a second
  /// weight image (empty: none).
  std::string second_images;
  size_t samples = 0;
  int64_t tokens = 0;  ///< Calibration tokens per pass over the samples.
  double seconds = 0;
  std::vector<pass::PassRecord> passes;  ///< every pass that ran, then "write", with wall times
  /// Per source dtype of the weights, what quantization did with them (source_types.h).
  std::vector<SourceTypeOutcome> source_types;
  /// Pre-quantized checkpoints: ImportedWeights::summary_text() and json() (else empty).
  std::string imported_text, imported_json;
};

/// A quantized model in memory: the quantized graph with its sidecar open (the weights the
/// passes rewrote, mapped from the file they were spilled to), and what the run did.
struct QuantizedModel {
  LoadedModel model;
  QuantizeSummary summary;
};

/// Runs the quant pipeline (quant::quant_pipeline) on `model`. The integer weights are
/// spilled to `sidecar` as they are made (memory stays at one layer) and the result maps
/// them; the graph stays in memory (save_quantized writes it). Everything that can be
/// refused (configuration, pipeline, --disable-pass names, calibration files) is refused
/// before any work; the sidecar is not left behind on failure.
StatusOr<QuantizedModel> quantize(const LoadedModel& model, const config::ResolvedConfig& config,
                                  const std::string& sidecar, const QuantizeRun& run);

/// Writes the graph of `q` as `out_mblt`, whose sidecar_path() must be the file quantize()
/// spilled to; fills the summary's MBLT figures and adds its time to the "write" record.
Status save_quantized(QuantizedModel& q, const std::string& out_mblt);

/// quantize() to sidecar_path(out_mblt), then save_quantized(): `qbc quantize`. Nothing is
/// left behind on failure.
StatusOr<QuantizeSummary> quantize_to(const LoadedModel& model,
                                      const config::ResolvedConfig& config,
                                      const std::string& out_mblt, const QuantizeRun& run);

}  // namespace qbc::driver
