// The executor's own timeline of the calls it ran (`qbc run MODEL.mxq --trace OUT.json`):
// per call, every instruction's host-clock stretch on its core and queue. These are measured
// host-executor times on the CPU, not NPU cycles: the executor runs a core's queues one after
// the other in program order, so a core's spans never overlap in the trace.
#pragma once

#include <cstdint>
#include <vector>

#include "qbc/isa/program.h"

namespace qbc::runtime {

/// One executed instruction: seconds on the steady clock from the start of its call.
struct ExecSpan {
  int32_t core = 0;  ///< the core within the instance
  isa::Queue queue = isa::Queue::kCompute;
  int32_t node = -1;    ///< Bundle::nodes index (-1: no node)
  const char* op = "";  ///< isa::op_name of the instruction
  double start = 0, end = 0;
};

/// One recorded Device::run.
struct ExecCall {
  isa::Phase phase = isa::Phase::kDecode;
  int64_t start = 0, seq = 1;  ///< the call's runtime values
  int slot = 0;
  double offset_s = 0;             ///< when the call started, from the first recorded call's start
  double seconds = 0;              ///< the whole call, from entry to return
  std::vector<double> core_end_s;  ///< per core of the instance: when its last instruction ended
  std::vector<ExecSpan> spans;     ///< by core, each core's in execution order
};

/// What Device::set_trace records into: the first prefill call and the decode calls after it,
/// up to max_decode_calls of them (later calls run untimed).
struct ExecTrace {
  int64_t max_decode_calls = 64;
  std::vector<ExecCall> calls;
  double epoch = -1;  ///< steady-clock seconds of the first recorded call (set by the device)

  /// Whether the next call of `phase` is recorded.
  bool wants(isa::Phase phase) const;
};

}  // namespace qbc::runtime
