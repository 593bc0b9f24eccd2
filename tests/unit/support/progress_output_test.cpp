// What progress looks like when stderr is not a terminal (a log file, a pipe, CI): the
// heartbeat line every interval while work runs, -v rate-limited to one line per finished
// unit of work, and the JSON channel carrying the same progress (rate, time left) and the
// heartbeat. stderr is redirected to a file, so these run the real ticker thread on a
// short interval.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "qbc/support/logging.h"
#include "qbc/support/progress.h"
#include "test_support.h"

namespace qbc {
namespace {

using testing::contains;

/// Sends stderr to a file for the lifetime of the object; text() reads what was written.
class StderrToFile {
 public:
  StderrToFile() : path_(testing::temp_dir() / "stderr.txt") {
    std::fflush(stderr);
    saved_ = dup(STDERR_FILENO);
    const int fd = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDERR_FILENO);
    close(fd);
  }
  ~StderrToFile() { restore(); }
  std::string text() {
    restore();
    return testing::read_file(path_);
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    dup2(saved_, STDERR_FILENO);
    close(saved_);
    saved_ = -1;
  }
  std::filesystem::path path_;
  int saved_ = -1;
};

std::vector<std::string> lines_with(const std::string& text, const std::string& needle) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (contains(line, needle)) out.push_back(line);
  return out;
}

/// init_logging as the CLI calls it, with --progress-interval `interval`.
void start_logging(int verbosity, bool quiet, LogFormat format, double interval) {
  init_logging(verbosity, quiet, format);
  progress::set_heartbeat_interval(interval);
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

TEST(ProgressOutput, HeartbeatLinesAppearWhileWorkRunsWithoutATerminal) {
  std::string log;
  {
    StderrToFile capture;
    start_logging(/*verbosity=*/0, /*quiet=*/false, LogFormat::kText, /*interval=*/0.1);
    events::step("quant", 3, 9, "calibrate");
    for (int i = 1; i <= 4; ++i) {
      sleep_s(0.1);
      events::progress("calib", i, 8);  // no line per sample at the default verbosity
    }
    sleep_s(0.35);  // a sample that takes long: the heartbeat goes on without events
    events::step_done("quant");
    sleep_s(0.3);  // nothing runs: no heartbeat
    log = capture.text();
  }
  const std::vector<std::string> beats = lines_with(log, "[progress] ");
  ASSERT_GE(beats.size(), 3u) << log;
  EXPECT_LE(beats.size(), 10u) << log;  // 0.75 s of work at one line per 0.1 s
  EXPECT_EQ(beats.size(), lines_with(log, "").size()) << log;  // nothing else at the default -v
  const std::string& last = beats.back();
  EXPECT_TRUE(contains(last, "[progress] [quant 3/9] calibrate · calib 4/8 · ")) << last;
  EXPECT_TRUE(contains(last, "/s · ")) << last;  // the rate
  EXPECT_TRUE(contains(last, " elapsed · ~")) << last;
  EXPECT_TRUE(contains(last, " left")) << last;
  // Lines are whole (no carriage returns of the terminal line).
  EXPECT_FALSE(contains(log, "\r")) << log;
  // After the pipeline ended, no more heartbeats: the last line is from the work.
  EXPECT_TRUE(contains(log.substr(log.rfind("[progress]")), "calib 4/8")) << log;
}

TEST(ProgressOutput, VerboseIsOneLinePerFinishedWorkNotOnePerUnit) {
  std::string log;
  {
    StderrToFile capture;
    start_logging(/*verbosity=*/1, /*quiet=*/false, LogFormat::kText, /*interval=*/30.0);
    events::step("quant", 1, 2, "calibrate");
    for (int i = 1; i <= 768; ++i) events::progress("calib", i, 768);
    events::step_done("quant");
    log = capture.text();
  }
  EXPECT_EQ(lines_with(log, "qbc.calib").size(), 1u) << log;
  EXPECT_TRUE(contains(log, "qbc.calib: calib 768/768 in ")) << log;
  EXPECT_EQ(lines_with(log, "step 1/2: calibrate").size(), 1u) << log;
  EXPECT_TRUE(lines_with(log, "[progress]").empty()) << log;  // shorter than the interval
}

TEST(ProgressOutput, QuietAndAZeroIntervalPrintNoHeartbeat) {
  for (const bool quiet : {true, false}) {
    std::string log;
    {
      StderrToFile capture;
      start_logging(0, quiet, LogFormat::kText, /*interval=*/quiet ? 0.05 : 0.0);
      events::step("quant", 1, 1, "calibrate");
      events::progress("calib", 1, 4);
      sleep_s(0.3);
      events::step_done("quant");
      log = capture.text();
    }
    EXPECT_TRUE(log.empty()) << "quiet=" << quiet << ": " << log;
  }
}

TEST(ProgressOutput, JsonEventsCarryRateTimeLeftAndHeartbeats) {
  std::string log;
  {
    StderrToFile capture;
    start_logging(0, false, LogFormat::kJson, /*interval=*/0.1);
    events::step("quant", 2, 5, "searchWeightScale");
    sleep_s(0.05);
    events::progress("awq", 1, 4);
    sleep_s(0.45);
    events::progress("awq", 2, 4);
    events::step_done("quant");
    log = capture.text();
  }
  int heartbeats = 0, counted = 0;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    ASSERT_EQ(j["event"], "progress") << line;
    EXPECT_TRUE(j.contains("elapsed_s")) << line;
    if (j.value("heartbeat", false)) {
      ++heartbeats;
      EXPECT_EQ(j["step"], 2) << line;
      EXPECT_EQ(j["pass"], "searchWeightScale") << line;
    }
    if (j.contains("done")) {
      ++counted;
      EXPECT_EQ(j["stage"], "awq") << line;
      EXPECT_EQ(j["total"], 4) << line;
      EXPECT_GT(j["rate_per_s"].get<double>(), 0) << line;
      EXPECT_GE(j["remaining_s"].get<double>(), 0) << line;
    }
  }
  EXPECT_GE(heartbeats, 2) << log;
  EXPECT_GE(counted, 3) << log;  // the two events and at least one heartbeat after the first
}

}  // namespace
}  // namespace qbc
