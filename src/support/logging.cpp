#include "qbc/support/logging.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>

#include "live_line.h"
#include "qbc/support/cancel.h"
#include "qbc/support/progress.h"

namespace qbc {
namespace {

struct LogState {
  std::mutex mu;
  spdlog::sink_ptr sink;
  spdlog::level::level_enum level = spdlog::level::warn;
  LogFormat format = LogFormat::kText;
  bool quiet = false;
};

LogState& state() {
  static LogState s;
  return s;
}

using live_line::Display;

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// Every event goes through here. Inputs are refused at their readers when not UTF-8
// (support/utf8.h, the command line in tools/qbc/main.cpp), but a log or error message may still
// quote bytes nobody could refuse (a library's own log line, an OS error text): those are replaced
// by U+FFFD rather than failing the run with nlohmann's type_error 316.
void write_json_line(const nlohmann::json& j) {
  std::string line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

// One JSON object per log record: {"event":"log","level":...,"logger":...,"message":...}.
class JsonSink final : public spdlog::sinks::base_sink<std::mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    nlohmann::json j;
    j["event"] = "log";
    j["time"] = now_seconds();
    j["level"] = std::string(spdlog::level::to_string_view(msg.level).data(),
                             spdlog::level::to_string_view(msg.level).size());
    j["logger"] = std::string(msg.logger_name.data(), msg.logger_name.size());
    j["message"] = std::string(msg.payload.data(), msg.payload.size());
    write_json_line(j);
  }
  void flush_() override { std::fflush(stderr); }
};

// Text logs on stderr; a live progress line is cleared before a record and redrawn after it.
class TextSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  TextSink()
      : inner_(std::make_shared<spdlog::sinks::stderr_color_sink_st>(
            isatty(fileno(stderr)) ? spdlog::color_mode::automatic : spdlog::color_mode::never)) {
    inner_->set_pattern("[%L] %n: %v");
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    live_line::State& l = live_line::state();
    std::lock_guard<std::mutex> lock(l.mu);
    const bool redraw = l.shown;
    live_line::clear_locked(l);
    inner_->log(msg);
    if (redraw) live_line::draw_locked(l);
  }
  void flush_() override { inner_->flush(); }
  void set_pattern_(const std::string& pattern) override { inner_->set_pattern(pattern); }

 private:
  std::shared_ptr<spdlog::sinks::stderr_color_sink_st> inner_;
};

spdlog::sink_ptr make_sink(LogFormat format) {
  if (format == LogFormat::kJson) return std::make_shared<JsonSink>();
  return std::make_shared<TextSink>();
}

}  // namespace

void init_logging(int verbosity, bool quiet, LogFormat format) {
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.format = format;
  s.quiet = quiet;
  {
    live_line::State& l = live_line::state();
    std::lock_guard<std::mutex> live_lock(l.mu);
    const Display display = quiet                        ? Display::kNone
                            : format == LogFormat::kJson ? Display::kJson
                            : isatty(fileno(stderr))     ? Display::kTerminal
                                                         : Display::kHeartbeat;
    live_line::configure_locked(l, display);
  }
  s.level = quiet            ? spdlog::level::err
            : verbosity <= 0 ? spdlog::level::warn
            : verbosity == 1 ? spdlog::level::info
            : verbosity == 2 ? spdlog::level::debug
                             : spdlog::level::trace;
  s.sink = make_sink(format);
  spdlog::apply_all([&](std::shared_ptr<spdlog::logger> l) {
    l->sinks().clear();
    l->sinks().push_back(s.sink);
    l->set_level(s.level);
  });
}

spdlog::logger& log(std::string_view stage) {
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  const std::string name = "qbc." + std::string(stage);
  if (auto existing = spdlog::get(name)) return *existing;
  if (!s.sink) s.sink = make_sink(s.format);
  auto logger = std::make_shared<spdlog::logger>(name, s.sink);
  logger->set_level(s.level);
  spdlog::register_logger(logger);
  return *logger;
}

bool json_events() { return state().format == LogFormat::kJson; }

namespace events {

void status(std::string_view stage, std::string_view message) {
  if (json_events()) {
    write_json_line(
        {{"event", "status"}, {"time", now_seconds()}, {"stage", stage}, {"message", message}});
  } else {
    log(stage).info("{}", message);
  }
}

void progress(std::string_view stage, int64_t done, int64_t total) {
  live_line::State& l = live_line::state();
  progress::Line snapshot;
  {
    std::lock_guard<std::mutex> lock(l.mu);
    if (l.display == Display::kNone) return;
    bool first = false;
    if (l.line.unit != stage || done < l.line.done) {
      // New work (another unit, or the count restarted): the estimate starts over.
      l.line.unit = std::string(stage);
      l.work_start = live_line::Clock::now();
      first = true;
    }
    l.line.done = done;
    l.line.total = total;
    live_line::activate_locked(l);
    // Work outside a pipeline that ended: what the command prints next starts on a clean line.
    const bool ended = done >= total && l.line.steps == 0;
    if (l.display == Display::kTerminal) {
      if (ended) {
        live_line::finish_locked(l);
      } else if (!l.shown || done == total || live_line::since(l.drawn) > 0.1) {
        live_line::draw_locked(l);
      }
      return;
    }
    live_line::stamp_locked(l);
    snapshot = l.line;
    if (ended) live_line::finish_locked(l);
    if (l.display == Display::kJson) {
      // Machine readers get the first and the last count and at most one a second between:
      // a calibration of 768 samples is a handful of events, not 768.
      const bool due = first || done >= total ||
                       live_line::since(l.json_sent) >= live_line::kJsonProgressSeconds;
      if (!due) return;
      l.json_sent = live_line::Clock::now();
    }
  }
  if (json_events()) {
    write_json_line(live_line::progress_event(snapshot, stage, /*heartbeat=*/false));
  } else if (done == total) {
    // -v: one line when counted work ends; while it runs, the heartbeat reports it.
    const std::string rate = progress::format_rate(progress::rate(snapshot));
    log(stage).info("{} {}/{} in {}{}", stage, done, total,
                    progress::format_duration(snapshot.step_seconds),
                    rate.empty() ? std::string() : " (" + rate + ")");
  }
}

void step(std::string_view stage, int step, int steps, std::string_view name) {
  live_line::State& l = live_line::state();
  progress::Line snapshot;
  {
    std::lock_guard<std::mutex> lock(l.mu);
    if (l.display == Display::kNone) return;
    l.line = progress::Line{};
    l.line.stage = std::string(stage);
    l.line.step = step;
    l.line.steps = steps;
    l.line.pass = std::string(name);
    l.work_start = live_line::Clock::now();
    live_line::activate_locked(l);
    if (l.display == Display::kTerminal) {
      live_line::draw_locked(l);
      return;
    }
    live_line::stamp_locked(l);
    snapshot = l.line;
  }
  if (json_events()) {
    write_json_line(live_line::progress_event(snapshot, stage, /*heartbeat=*/false));
  } else {
    log(stage).info("step {}/{}: {}", step, steps, name);
  }
}

void step_done(std::string_view) {
  live_line::State& l = live_line::state();
  std::lock_guard<std::mutex> lock(l.mu);
  live_line::finish_locked(l);
}

void summary(std::string_view command, std::string_view text, std::string_view json) {
  {
    live_line::State& l = live_line::state();
    std::lock_guard<std::mutex> lock(l.mu);
    live_line::finish_locked(l);
  }
  if (state().quiet) return;
  if (json_events()) {
    nlohmann::json j = {
        {"event", "summary"}, {"time", now_seconds()}, {"command", command}, {"message", text}};
    j["result"] = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
    write_json_line(j);
    return;
  }
  std::fprintf(stderr, "qbc %.*s: %.*s\n", static_cast<int>(command.size()), command.data(),
               static_cast<int>(text.size()), text.data());
  std::fflush(stderr);
}

void result(std::string_view command, std::string_view json) {
  if (!json_events()) return;
  nlohmann::json j = {{"event", "result"}, {"time", now_seconds()}, {"command", command}};
  j["result"] = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  write_json_line(j);
}

void error(const Status& st, int exit_code) {
  {
    live_line::State& l = live_line::state();
    std::lock_guard<std::mutex> lock(l.mu);
    live_line::finish_locked(l);
  }
  // Once Ctrl-C / SIGTERM asked to stop, a failure is the interruption (support/cancel.h).
  const bool interrupted = cancel::requested();
  if (json_events()) {
    write_json_line({{"event", "error"},
                     {"time", now_seconds()},
                     {"code", interrupted ? std::string_view("cancelled") : code_name(st.code())},
                     {"exit_code", exit_code},
                     {"message", st.message()}});
  } else if (interrupted) {
    std::fputs("qbc: interrupted\n", stderr);
    std::fflush(stderr);
  } else {
    std::fprintf(stderr, "qbc: error: %s\n", st.message().c_str());
    std::fflush(stderr);
  }
}

}  // namespace events
}  // namespace qbc
