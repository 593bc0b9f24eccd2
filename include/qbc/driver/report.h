// `qbc report MODEL.mxq` and `qbc compile --report`: the self-contained HTML report of a
// compiled file (qbc/report/report.h), with what only a compile knows when it writes it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/driver/compile.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// What the report of one compiled MXQ shows.
struct ReportRequest {
  std::string mxq_path;  ///< the compiled .mxq (or manifest)
  std::string output;    ///< the HTML file, written atomically
  std::string accuracy;  ///< optional: the JSON of `qbc eval MODEL --reference REF --json`
  /// Known when a compile writes the report: the configuration with the origin of every
  /// value, and the compile's timed steps. Otherwise the values stored in the file are shown
  /// with a note, and the pass times are "not recorded".
  const config::ResolvedConfig* compiled = nullptr;
  std::vector<TimedStep> steps;
  int64_t prompt_tokens = 240;  ///< the cost model's decode step runs after this many tokens
};

/// Writes the report; returns the bytes written.
StatusOr<size_t> write_report(const ReportRequest& r);

}  // namespace qbc::driver
