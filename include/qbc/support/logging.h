// Logging and machine-readable events.
//
// Logs go to stderr through one named spdlog logger per stage ("qbc.config",
// "qbc.frontend", ...). Results go to stdout, written by the command itself.
// With --log-format json every log line, and every status/progress/result/error
// event, is one JSON object per line on stderr, for CI tools.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "qbc/support/status.h"

namespace qbc {

/// How logs and events are written to stderr.
enum class LogFormat { kText, kJson };

/// Configures logging once, at start-up: `verbosity` 0 = warnings, 1 = info
/// (-v), 2 = debug (-vv), 3+ = trace; `quiet` shows errors only.
void init_logging(int verbosity, bool quiet, LogFormat format);

/// The logger of a stage, e.g. log("config"); created on first use.
spdlog::logger& log(std::string_view stage);

/// True when --log-format json is active.
bool json_events();

/// Machine-readable events. In text mode, status and progress become info
/// logs, errors become "qbc: error: ..." lines, results print nothing (the
/// command prints its result to stdout).
namespace events {
/// A stage starts or ends, e.g. status("parse", "started").
void status(std::string_view stage, std::string_view message);
/// Progress of long work: `done` of `total` units in `stage`. On a terminal (text
/// mode, not -q) it redraws the live progress line (support/progress.h); with json it
/// is a progress event carrying the running pipeline step and the time left; in text
/// mode without a terminal it is an info log ("done/total", -v).
void progress(std::string_view stage, int64_t done, int64_t total);
/// A pipeline runs its pass `name`, step `step` of `steps` (the pass manager calls this).
void step(std::string_view stage, int step, int steps, std::string_view name);
/// The pipeline of `stage` ended: the live line is cleared.
void step_done(std::string_view stage);
/// The one line a command that wrote files ends with: what it wrote, sizes, time,
/// key figures. Printed to stderr as "qbc <command>: <text>" unless -q; with json a
/// summary event with `json` (serialised object) as its "result".
void summary(std::string_view command, std::string_view text, std::string_view json = "{}");
/// A command's result as a JSON document (already serialised).
void result(std::string_view command, std::string_view json);
/// A failure: the status and the exit code it maps to.
void error(const Status& status, int exit_code);
}  // namespace events

}  // namespace qbc
