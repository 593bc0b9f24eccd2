// `qbc inspect MODEL.mxq --trace OUT.json`: the cost model's schedule of one prefill chunk and
// one decode step of the file's first mode as a Chrome trace (layout: qbc/report/trace.h).
#pragma once

#include <cstddef>
#include <string>

#include "qbc/mxq/model_file.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// The trace document and what it holds, for the command's summary line.
struct CostTrace {
  std::string json;
  size_t spans = 0;     ///< instruction events
  std::string scheme;   ///< the mode traced
  int32_t cores = 0;    ///< its cores per instance
  std::string figures;  ///< "prefill chunk 12.3 us, decode step 4.5 us"
};

/// The cost model (with the target profile stored in `m`, read from `path`) on the first
/// mode of `m`. kInvalidArgument naming the file when it holds no program.
StatusOr<CostTrace> cost_trace(const std::string& path, const mxq::LoadedModel& m);

}  // namespace qbc::driver
