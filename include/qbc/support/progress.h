// The live progress line of long commands: which pipeline step runs (k of n), the
// work unit inside it (block i of L, sample j of N), the elapsed time and an estimate
// of what is left. events::step / events::progress (logging.h) feed it; on a terminal
// it is one line redrawn in place, with --log-format json it becomes progress events,
// and -q silences it. The formatting is pure so tests can check it.
#pragma once

#include <cstdint>
#include <string>

namespace qbc::progress {

/// What the line shows.
struct Line {
  std::string stage;        ///< Stage running the pipeline ("quant"); empty outside one.
  int step = 0, steps = 0;  ///< Position of the running pass in its pipeline (1-based; 0 = none).
  std::string pass;         ///< The running pass.
  std::string unit;         ///< What `done` counts ("calib", "gptq"); empty before any progress.
  int64_t done = 0, total = 0;
  double step_seconds = 0;  ///< Since the current work (`unit`, or the step) began.
  double seconds = 0;       ///< Since the command began.
};

/// Seconds the current work still needs, extrapolated from its rate so far
/// (step_seconds × (total − done) / done); negative when unknown (nothing done yet).
double remaining_seconds(const Line& line);

/// "[quant 3/9] calibrate · calib 2/8 · 14 s elapsed · ~40 s left".
std::string format(const Line& line);

/// "14 s", "3 min 05 s", "1 h 02 min".
std::string format_duration(double seconds);

}  // namespace qbc::progress
