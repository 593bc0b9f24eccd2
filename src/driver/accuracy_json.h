// Private to src/driver: the whole-model figures of an accuracy report as JSON, shared by
// `qbc eval --json` (report_json) and each row of `--ctx-sweep` (sweep_json).
#pragma once

#include <nlohmann/json.hpp>

#include "qbc/driver/accuracy.h"

namespace qbc::driver {

/// ctx, chunks, tokens_scored, perplexity (and the reference's), KLD mean / p99 / max, top-1,
/// seconds, in that order.
nlohmann::ordered_json accuracy_figures_json(const AccuracyReport& r);

}  // namespace qbc::driver
