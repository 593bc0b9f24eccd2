#include "qbc/support/logging.h"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>

namespace qbc {
namespace {

struct LogState {
  std::mutex mu;
  spdlog::sink_ptr sink;
  spdlog::level::level_enum level = spdlog::level::warn;
  LogFormat format = LogFormat::kText;
};

LogState& state() {
  static LogState s;
  return s;
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

void write_json_line(const nlohmann::json& j) {
  std::string line = j.dump() + "\n";
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

spdlog::sink_ptr make_sink(LogFormat format) {
  if (format == LogFormat::kJson) return std::make_shared<JsonSink>();
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>(
      isatty(fileno(stderr)) ? spdlog::color_mode::automatic : spdlog::color_mode::never);
  sink->set_pattern("[%L] %n: %v");
  return sink;
}

}  // namespace

void init_logging(int verbosity, bool quiet, LogFormat format) {
  LogState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.format = format;
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
    write_json_line({{"event", "status"}, {"time", now_seconds()}, {"stage", stage}, {"message", message}});
  } else {
    log(stage).info("{}", message);
  }
}

void progress(std::string_view stage, int64_t done, int64_t total) {
  if (json_events()) {
    write_json_line({{"event", "progress"}, {"time", now_seconds()}, {"stage", stage},
                     {"done", done}, {"total", total}});
  } else {
    log(stage).info("{}/{}", done, total);
  }
}

void result(std::string_view command, std::string_view json) {
  if (!json_events()) return;
  nlohmann::json j = {{"event", "result"}, {"time", now_seconds()}, {"command", command}};
  j["result"] = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  write_json_line(j);
}

void error(const Status& st, int exit_code) {
  if (json_events()) {
    write_json_line({{"event", "error"}, {"time", now_seconds()}, {"code", code_name(st.code())},
                     {"exit_code", exit_code}, {"message", st.message()}});
  } else {
    std::fprintf(stderr, "qbc: error: %s\n", st.message().c_str());
    std::fflush(stderr);
  }
}

}  // namespace events
}  // namespace qbc
