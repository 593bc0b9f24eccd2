// The pass interface every stage's rewrites implement (XLA's HloPassInterface shape):
// a stable name, what the pass needs from its context, what it provides, and
// `run`, which says whether it changed anything. Passes keep no state between runs
// and touch no globals; each stage supplies its own Context type (quant::PassContext,
// later the npu stage's). The PassManager (pass_manager.h) checks the needs once,
// verifies after every pass, times, dumps and reports them.
#pragma once

#include <cstdint>
#include <string>

#include "qbc/support/status.h"

namespace qbc::pass {

/// A set of context resources (calibration statistics, samples, ...), as bits a stage
/// defines for its Context; see PassManager for how needs are checked.
using ResourceSet = uint32_t;

template <class Context>
class Pass {
 public:
  virtual ~Pass() = default;
  /// The stable name: the config key the pass answers to ("spinR1", "hessianQuant"),
  /// used by --disable-pass, --dump-after and --print-pipeline.
  virtual std::string name() const = 0;
  /// Resources of `Context` the pass reads; the manager refuses a pipeline in which an
  /// earlier pass (or the initial context) does not provide each of them.
  virtual ResourceSet needs() const { return 0; }
  /// Resources the pass fills in the context for later passes.
  virtual ResourceSet provides() const { return 0; }
  /// Rewrites the context's unit (graph, weights). Returns true when anything changed.
  virtual StatusOr<bool> run(Context& ctx) = 0;
};

}  // namespace qbc::pass
