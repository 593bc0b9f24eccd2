// Private to src/driver: `qbc inspect MODEL.mxq --cost` (inspect_compiled).
#pragma once

#include <cstdint>
#include <string>

#include "qbc/driver/inspect.h"
#include "qbc/mxq/model_file.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// The cost model on the exact programs of `m` (read from `path`), with the target profile of
/// its stored configuration: per scheme the TTFT of `prompt_tokens` (clamped to the cache),
/// the decode rate, the roofline fraction and the bound, and a table of the decode step by
/// node; as JSON with `json`. Event "inspect-cost".
StatusOr<Inspection> compiled_cost(const std::string& path, const mxq::LoadedModel& m, bool json,
                                   int64_t prompt_tokens);

}  // namespace qbc::driver
