// The progress line of long commands: which pipeline step runs (k of n), the work unit
// inside it (block i of L, sample j of N), its rate, the elapsed time and an estimate of
// what is left. events::step / events::progress (logging.h) feed it; on a terminal it is
// one line redrawn in place, elsewhere (a log file, a pipe, CI) a heartbeat line every
// --progress-interval seconds, with --log-format json progress events; -q silences it.
// The formatting and the heartbeat's schedule are pure so tests can drive them.
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

/// Units of the current work done per second (done / step_seconds); negative when unknown
/// (nothing done yet, or no time elapsed).
double rate(const Line& line);

/// "4.2/s" for a fast rate, "12 s each" for a slow one; empty when the rate is unknown.
std::string format_rate(double per_second);

/// "[quant 3/9] calibrate · calib 2/8 · 5.0 s each · 14 s elapsed · ~30 s left".
std::string format(const Line& line);

/// "14 s", "3 min 05 s", "1 h 02 min".
std::string format_duration(double seconds);

/// When a heartbeat line is due: `interval` seconds after work began or after the last
/// line. Times are seconds on the caller's clock, so tests drive it with a fake one.
class Heartbeat {
 public:
  /// `interval` <= 0 turns the heartbeat off (never due).
  explicit Heartbeat(double interval = 30.0) : interval_(interval) {}
  double interval() const { return interval_; }
  /// Work began, or a line was printed, at `now`: the next line is due `interval` later.
  void restart(double now) { next_ = now + interval_; }
  /// Whether a line is due at `now`.
  bool due(double now) const { return interval_ > 0 && now >= next_; }
  /// Seconds from `now` until the next line is due (0 when due, `fallback` when off).
  double wait(double now, double fallback) const;

 private:
  double interval_;
  double next_ = 0;
};

/// Seconds between heartbeat lines when stderr is not a terminal (`--progress-interval`;
/// default 30): while work runs, one line of format() every interval (with --log-format
/// json a progress event marked "heartbeat"); <= 0 turns the heartbeat off. On a terminal
/// the live line is redrawn every second instead.
void set_heartbeat_interval(double seconds);

}  // namespace qbc::progress
