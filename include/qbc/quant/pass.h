// Quantization passes: graph + weight rewrites that run in a fixed pipeline order.
// Every pass says whether it changed anything; the pipeline runs ir::verify() and a
// weight-size check after each one, logs it, and records its wall time (qbc compile -v).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/ir/graph.h"
#include "qbc/quant/calibrate.h"
#include "qbc/quant/quantize.h"
#include "qbc/quant/weight_store.h"
#include "qbc/ref/session.h"
#include "qbc/support/status.h"

namespace qbc::quant {

/// A rewrite of the embedded input rows in place (see PassContext::input_transforms).
using InputTransform = std::function<Status(std::vector<float>* embeds, int64_t seq)>;

/// What a pass works on.
struct PassContext {
  ir::Graph* graph = nullptr;
  WeightStore* weights = nullptr;
  const config::CompileOptions* options = nullptr;
  /// Activation statistics of the current graph, for passes that need them (scale
  /// migrations, weight-scale search); null before calibration.
  const CalibStats* stats = nullptr;
  /// Calibration samples, for passes that run the model block by block (BlockRunner):
  /// hessianQuant, searchWeightScale. Null when not available.
  const SampleSource* samples = nullptr;
  size_t num_samples = 0;
  ref::SessionOptions session;
  /// Integer weights passes chose, by linear node name; quantize_rtn uses them instead
  /// of round-to-nearest. Null when the pipeline does not collect them.
  FixedWeightMap* fixed = nullptr;
  /// Rewrites of the graph input (inputs_embeds, [seq, hidden] row-major) that a pass
  /// made part of the model's contract, e.g. spinR1's x ← x·R: the host embedding table
  /// is rewritten with them, but embeddings computed elsewhere (calibration .npy files,
  /// random calibration) must go through them too. Null when nobody collects them.
  std::vector<InputTransform>* input_transforms = nullptr;
};

class Pass {
 public:
  virtual ~Pass() = default;
  /// The config key spelling the pass is known by ("normConv", "spinR1", ...).
  virtual std::string name() const = 0;
  /// Rewrites ctx.graph / ctx.weights. Returns true when anything changed.
  virtual StatusOr<bool> run(PassContext& ctx) = 0;
};

/// Replaces the data of graph weight `name` with `values` (float32) in ctx.weights and
/// re-declares the weight as an f32 sidecar tensor of its own: it no longer equals the
/// source model's tensor (nor a tied twin of it), and quantize writes it to the sidecar.
void rewrite_weight(PassContext& ctx, const std::string& name, std::vector<float> values);

/// One pass's run, for -v output and the ablation table.
struct PassRecord {
  std::string name;
  bool changed = false;
  double seconds = 0.0;
};

/// Runs `passes` in order on ctx with ir::verify() and check_rewritten_sizes() after each;
/// errors carry the pass name. Appends a record per pass to `records` when non-null.
Status run_passes(const std::vector<std::unique_ptr<Pass>>& passes, PassContext& ctx,
                  std::vector<PassRecord>* records = nullptr);

}  // namespace qbc::quant
