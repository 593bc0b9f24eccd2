// The quant stage's side of the pass framework (qbc/pass/): the context its passes
// rewrite, the resources a pass can declare it needs, and the pass type. The pass
// manager checks the needs once, runs ir::verify() and a weight-size check after each
// pass (PassContext::verify), logs and times it (qbc quantize -v).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/ir/graph.h"
#include "qbc/pass/pass.h"
#include "qbc/pass/pass_manager.h"
#include "qbc/quant/calibrate.h"
#include "qbc/quant/checkpoint.h"
#include "qbc/quant/quantize.h"
#include "qbc/quant/weight_store.h"
#include "qbc/ref/session.h"
#include "qbc/support/status.h"

namespace qbc::quant {

/// A rewrite of the embedded input rows in place (see PassContext::input_transforms).
using InputTransform = std::function<Status(std::vector<float>* embeds, int64_t seq)>;

/// What the spinR1 check measured (spinR1.policy ifBetter), for the passes it gates.
struct RotationGate {
  bool decided = false;  ///< The check ran.
  bool rotate = true;    ///< normConv and spinR1 run.
  double plain = 0;      ///< Mean relative RTN output error of the measured linears, as is.
  double rotated = 0;    ///< The same after normConv + spinR1.
  int64_t linears = 0;   ///< Linears measured.
};

/// Resources of PassContext a pass can need or provide (pass::ResourceSet bits).
enum Resource : pass::ResourceSet {
  kCalibSamples = 1u << 0,     ///< samples / num_samples: the calibration set.
  kScaleStats = 1u << 1,       ///< stats of the transformed float graph (calibrateScales).
  kFinalStats = 1u << 2,       ///< stats of the final graph (calibrate).
  kFixedWeights = 1u << 3,     ///< fixed: the map of integer weights passes choose.
  kRotationVerdict = 1u << 4,  ///< rotation: the spinR1 check's verdict.
  kTensorSink = 1u << 5,       ///< sink: where quantizeRtn writes the integer tensors.
};

/// What a quant pass works on. graph, weights and options are always set.
struct PassContext {
  PassContext() = default;
  // `stats` may point into owned_stats: a copy would point into the original.
  PassContext(const PassContext&) = delete;
  PassContext& operator=(const PassContext&) = delete;

  static constexpr const char* kStage = "quant";
  static constexpr const char* kDumpExtension = "mblt.txt";

  ir::Graph* graph = nullptr;
  WeightStore* weights = nullptr;
  const config::CompileOptions* options = nullptr;
  /// Activation statistics of the current graph; null before calibration. The
  /// calibration passes fill owned_stats and point here; tests may point elsewhere.
  const CalibStats* stats = nullptr;
  CalibStats owned_stats;
  /// Which statistics `stats` holds (kScaleStats, kFinalStats, or both when a caller set
  /// them directly).
  pass::ResourceSet stats_resource = kScaleStats | kFinalStats;
  /// Calibration samples, for passes that run the model block by block (BlockRunner):
  /// the calibration passes, spinR1Check, hessianQuant, searchWeightScale. They see the
  /// model's input as the passes so far defined it (input_transforms applied).
  const SampleSource* samples = nullptr;
  size_t num_samples = 0;
  /// The samples' DeepStack rows (Qwen3-VL image-text samples; input_transforms applied), for
  /// every BlockRunner; null: zero rows.
  const DeepStackSource* deepstack = nullptr;
  ref::SessionOptions session;
  /// Integer weights passes chose, by linear node name; quantize_rtn uses them instead
  /// of round-to-nearest. Null when the pipeline does not collect them.
  FixedWeightMap* fixed = nullptr;
  /// The second weight images (bit.prefill / bit.decode) the phaseImages pass rounded from
  /// the float weights before hessianQuant replaces them, by linear node name; quantizeRtn
  /// writes them and empties the map.
  FixedWeightMap second_images_chosen;
  /// Rewrites of the graph input (inputs_embeds, [seq, hidden] row-major) that a pass
  /// made part of the model's contract, e.g. spinR1's x ← x·R: the host embedding table
  /// is rewritten with them, but embeddings computed elsewhere (calibration .npy files,
  /// random calibration) must go through them too. Null when nobody collects them.
  std::vector<InputTransform>* input_transforms = nullptr;
  /// The spinR1 check's verdict (kRotationVerdict once decided).
  RotationGate rotation;
  /// Where quantizeRtn writes the integer weights and scales; null without a sink.
  TensorSink sink;
  /// Where block-by-block calibration checkpoints each finished block, and finds the blocks
  /// an earlier run on the same inputs finished (quant/checkpoint.h); null: no checkpoints.
  const CheckpointDir* checkpoints = nullptr;
  /// What quantizeRtn did.
  int quantized_linears = 0, float_linears = 0;
  /// Linears with a second weight image for one phase (bit.prefill / bit.decode).
  int second_images = 0;

  /// The resources the context holds now.
  pass::ResourceSet available() const;
  /// Names of resource bits ("calibration samples, statistics of the final graph").
  static std::string describe(pass::ResourceSet resources);
  /// The weight store's sticky write error (scratch space exhausted), if any.
  Status health() const;
  /// ir::verify() and check_rewritten_sizes().
  Status verify() const;
  /// The graph in MBLT text form.
  StatusOr<std::string> dump_text() const;
};

using Pass = pass::Pass<PassContext>;
using PassRecord = pass::PassRecord;

/// Replaces the data of graph weight `name` with `values` (float32) in ctx.weights and
/// re-declares the weight as an f32 sidecar tensor of its own: it no longer equals the
/// source model's tensor (nor a tied twin of it), and quantize writes it to the sidecar.
void rewrite_weight(PassContext& ctx, const std::string& name, std::vector<float> values);

/// Runs `passes` in order through a pass manager with `instr` (needs checked first,
/// verifier after each; errors carry the pass name). Appends a record per pass that
/// ran to `records` when non-null.
Status run_passes(const std::vector<std::unique_ptr<Pass>>& passes, PassContext& ctx,
                  std::vector<PassRecord>* records = nullptr,
                  const pass::Instrumentation& instr = {});

}  // namespace qbc::quant
