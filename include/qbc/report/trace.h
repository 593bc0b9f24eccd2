// The timeline trace of `qbc inspect MODEL.mxq --trace OUT.json`: the cost model's
// schedule (qbc/npu/cost_model.h) of one prefill chunk and one decode step of one mode,
// instruction by instruction on every core and queue, in the Chrome trace event format
// (a JSON object with "traceEvents") that Perfetto and chrome://tracing open.
//
// Layout: process (pid) k + 1 is core k of the instance, named "core k"; its threads
// (tid) are the queues, 1 = load, 2 = compute, 3 = store, and 4 = "calls", which holds one
// event per call spanning the core's part of it (its total time in the cost model).
// Timestamps are microseconds; the decode step starts when the prefill chunk's call ends
// (its slowest core plus the host overhead).
#pragma once

#include <string>
#include <vector>

#include "qbc/isa/program.h"
#include "qbc/npu/cost_model.h"
#include "qbc/support/status.h"

namespace qbc::report {

/// One evaluated call of the trace.
struct TraceCall {
  std::string name;  ///< "prefill chunk", "decode step"
  isa::Phase phase = isa::Phase::kDecode;
  int64_t start = 0, seq = 1;  ///< cached positions before the call, tokens of the call
  double offset_s = 0;         ///< when the call starts on the trace's clock
  npu::CallCost cost;          ///< with spans and per-core end times
};

/// The cost model on one prefill chunk (positions [0, chunk)) and on the decode step
/// right after it, with every instruction's span.
StatusOr<std::vector<TraceCall>> trace_calls(const isa::Bundle& b, const isa::Mode& mode,
                                             const npu::CostParams& p);

/// Where a trace's times come from, written into its "otherData".
struct TraceSource {
  std::string producer = "qbc inspect --trace (cost model)";
  std::string times = "cost model estimate (qbc/npu/cost_model.h), not measured";
};

/// The calls as a Chrome trace event JSON document (see the layout above). Only each call's
/// name, phase, start, seq, offset_s and its cost's core_end_s and spans are read.
std::string chrome_trace_json(const isa::Bundle& b, const isa::Mode& mode,
                              const std::vector<TraceCall>& calls, const TraceSource& source = {});

}  // namespace qbc::report
