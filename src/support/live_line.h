// Private to src/support: the state of the progress line (support/progress.h), shared by
// the text log sink (which clears and redraws it around a record) and the progress events
// (logging.cpp), and the ticker thread that keeps it moving while work runs without
// events: on a terminal it redraws the line once a second (the elapsed time advances);
// elsewhere it prints the heartbeat, one line every --progress-interval seconds (text), or
// a progress event with "heartbeat": true (--log-format json).
#pragma once

#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "qbc/support/progress.h"

namespace qbc::live_line {

using Clock = std::chrono::steady_clock;

/// How progress is shown.
enum class Display {
  kNone,       ///< -q: not at all.
  kTerminal,   ///< Text on a terminal: one line redrawn in place.
  kHeartbeat,  ///< Text elsewhere (a file, a pipe): a heartbeat line every interval.
  kJson,       ///< --log-format json: progress events, and heartbeat events every interval.
};

/// The line and how it is shown. Its own mutex: the text sink takes it to clear and redraw
/// the line around a log record, so nothing may log while holding it.
struct State {
  std::mutex mu;
  Display display = Display::kNone;
  bool active = false;  ///< Work is running: a pipeline step or counted work since the last clear.
  bool shown = false;   ///< A line is on the terminal now (kTerminal).
  Clock::time_point start = Clock::now(), work_start = Clock::now(), drawn;
  /// When the last counted progress event was written (kJson): between the first and the
  /// last count of a work unit, at most one event every kJsonProgressSeconds.
  Clock::time_point json_sent;
  progress::Line line;
  progress::Heartbeat heartbeat{30.0};
};

/// Seconds between two JSON progress events of the same counted work (its first and last
/// count are always written; heartbeats are separate).
inline constexpr double kJsonProgressSeconds = 1.0;

/// The process's one state.
State& state();

/// Seconds since `t`.
double since(Clock::time_point t);

/// Sets the display; the clock of the elapsed times starts now. Call with state().mu held.
void configure_locked(State& s, Display display);

/// Updates the line's elapsed times to now. Callers hold s.mu.
void stamp_locked(State& s);
/// Redraws the terminal line. Callers hold s.mu.
void draw_locked(State& s);
/// Erases the terminal line if one is shown. Callers hold s.mu.
void clear_locked(State& s);
/// Work runs: the heartbeat counts from now if it did not run already, and the ticker
/// thread is started if the display needs it. Callers hold s.mu.
void activate_locked(State& s);
/// Work ended: the line is erased and forgotten. Callers hold s.mu.
void finish_locked(State& s);

/// The JSON progress event of the line: "event": "progress", stage, done, total, rate,
/// pipeline step, elapsed and remaining seconds.
nlohmann::json progress_event(const progress::Line& line, std::string_view stage, bool heartbeat);

}  // namespace qbc::live_line
