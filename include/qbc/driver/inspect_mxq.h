// `qbc inspect MODEL.mxq`: a compiled file's summary (header, sections with sizes and digests,
// schemes, KV layout, provenance), its own memory plan and programs, and the cost model on its
// programs. `qbc verify` is qbc/driver/verify_compiled.h.
#pragma once

#include <cstdint>
#include <string>

#include "qbc/driver/inspect.h"
#include "qbc/mxq/model_file.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// Reads the compiled .mxq (or manifest) at `path`, checking its section digests unless
/// `verify_digests` is false. Errors name the file and section (kDataLoss, exit 2).
StatusOr<mxq::LoadedModel> open_compiled(const std::string& path, bool verify_digests = true);

/// What to show of a compiled file.
struct CompiledInspectRequest {
  bool json = false;     ///< as JSON
  bool memory = false;   ///< the file's memory plan
  bool program = false;  ///< its NPU programs in text form (after the plan with both)
  /// The cost model on the file's programs with the target profile of its stored
  /// configuration, per scheme and per node of the decode step (instead of the rest).
  bool cost = false;
  int64_t prompt_tokens = 240;  ///< --cost: the TTFT's prompt (clamped to the cache)
};

/// The view `r` asks for of `m`, read from `path`: the summary by default (event
/// "inspect"), the memory plan and / or the programs, or the cost (event "inspect-cost";
/// kDataLoss naming the file when its stored configuration does not load).
StatusOr<Inspection> inspect_compiled(const std::string& path, const mxq::LoadedModel& m,
                                      const CompiledInspectRequest& r);

}  // namespace qbc::driver
