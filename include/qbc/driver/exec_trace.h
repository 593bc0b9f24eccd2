// `qbc run MODEL.mxq --trace OUT.json`: the executor's measured timeline (runtime::ExecTrace)
// written in the same Chrome trace event layout as the cost model's `inspect --trace`
// (qbc/report/trace.h), so Perfetto shows the two side by side.
#pragma once

#include <string>

#include "qbc/isa/program.h"
#include "qbc/runtime/exec_trace.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// What an executor trace holds, for the command's summary line.
struct ExecTraceSummary {
  size_t calls = 0, spans = 0;
  double prefill_us = 0;      ///< the recorded prefill chunk's call
  double decode_mean_us = 0;  ///< mean over the recorded decode steps (0: none)
};

/// `trace` (recorded by the device running `mode` of `b`) as a Chrome trace event JSON
/// document: pid k + 1 is core k, tids 1..3 its queues and 4 its calls; the metadata say the
/// times are measured host-executor times. kFailedPrecondition when nothing was recorded.
StatusOr<std::string> exec_trace_json(const isa::Bundle& b, const isa::Mode& mode,
                                      const runtime::ExecTrace& trace);

/// The figures of `trace` for a summary line.
ExecTraceSummary summarize(const runtime::ExecTrace& trace);

}  // namespace qbc::driver
