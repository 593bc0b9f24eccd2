// Progress when stderr is not a terminal (`qbc compile ... 2>log`, CI, `| tee`): heartbeat
// lines every --progress-interval seconds while the pipelines run (stage, n/N, rate,
// elapsed, time left), -v with one line per finished unit of work instead of one per
// sample, and the JSON channel carrying the same progress plus heartbeat events.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::run_qbc;
using testing::shell_quote;

std::vector<std::string> lines_with(const std::string& text, const std::string& needle) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (contains(line, needle)) out.push_back(line);
  return out;
}

/// `qbc GLOBAL compile stories260K --preset llm --use-random-calib EXTRA -o DIR/q.mxq`.
testing::RunResult compile(const fs::path& hf, const std::string& global,
                           const std::string& extra = "") {
  const fs::path dir = testing::temp_dir();
  return run_qbc(global + " compile " + shell_quote(hf) + " --preset llm --use-random-calib " +
                 extra + " -o " + shell_quote(dir / "q.mxq"));
}

/// Enough counted work that a heartbeat lands inside it on a loaded machine: the default 8
/// random samples calibrate stories260K in about 0.1 s, which a busy ctest -j2 run missed;
/// 64 samples take about 2 s of counted work (calibration and the AWQ search).
const char* const kLongCalib = "--set calibration.numSamples=64";

TEST(ProgressCli, CompileToALogFileWritesHeartbeatLines) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  // A short interval so that some heartbeat lands inside counted work (calibration, the AWQ
  // search, GPTQ) whichever stage the machine happens to be in at the time.
  const auto r = compile(hf, "--progress-interval 0.05", kLongCalib);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> beats = lines_with(r.err, "[progress] ");
  ASSERT_FALSE(beats.empty()) << r.err;
  bool counted = false;
  for (const std::string& b : beats) {
    EXPECT_EQ(b.rfind("[progress] [", 0), 0u) << b;  // a whole line, starting with the stage
    EXPECT_TRUE(contains(b, " elapsed")) << b;
    // Counted work shows n/N with its rate and, with the rate, the time left.
    if (contains(b, "/s · ")) {
      EXPECT_TRUE(std::regex_search(b, std::regex(" [0-9]+/[0-9]+ · "))) << "no n/N: " << b;
      counted = true;
      EXPECT_TRUE(contains(b, " left")) << b;
    }
  }
  EXPECT_TRUE(counted) << r.err;
  EXPECT_FALSE(contains(r.err, "\r")) << "terminal control characters in a log file";
  EXPECT_TRUE(contains(r.err, "qbc compile: wrote ")) << r.err;
  // An interval of 0 turns the heartbeat off.
  const auto off = compile(hf, "--progress-interval 0");
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_TRUE(lines_with(off.err, "[progress]").empty()) << off.err;
}

TEST(ProgressCli, VerboseReportsFinishedWorkNotEverySample) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const auto r = compile(hf, "-v");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> calib = lines_with(r.err, "qbc.calib: calib ");
  ASSERT_FALSE(calib.empty()) << r.err;
  EXPECT_TRUE(lines_with(r.err, "qbc.calib: 1/").empty()) << "a line per sample: " << r.err;
  // One line per calibration run ("calib 56/56 in 2 s (28.0/s)"), never one per sample.
  const size_t steps = lines_with(r.err, "qbc.quant: step ").size();
  EXPECT_LE(calib.size(), steps) << r.err;
  for (const std::string& l : calib) {
    EXPECT_TRUE(contains(l, " in ")) << l;
    const size_t slash = l.find('/');
    ASSERT_NE(slash, std::string::npos) << l;
    const size_t num = l.rfind(' ', slash) + 1;
    const std::string done = l.substr(num, slash - num);
    EXPECT_EQ(l.substr(slash + 1, done.size() + 1), done + " ") << "not a finished count: " << l;
  }
}

TEST(ProgressCli, JsonEventsCarryHeartbeatsAndRates) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const auto r = compile(hf, "--log-format json --progress-interval 0.2", kLongCalib);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int heartbeats = 0, rated = 0;
  std::istringstream in(r.err);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    if (j["event"] != "progress") continue;
    EXPECT_TRUE(j.contains("stage") && j.contains("elapsed_s")) << line;
    if (j.value("heartbeat", false)) ++heartbeats;
    if (j.contains("done") && j["done"].get<int64_t>() > 0) {
      EXPECT_GT(j["rate_per_s"].get<double>(), 0) << line;
      EXPECT_TRUE(j.contains("remaining_s")) << line;
      ++rated;
    }
  }
  EXPECT_GE(heartbeats, 1) << r.err;
  EXPECT_GE(rated, 1) << r.err;
}

TEST(ProgressCli, JsonCountedProgressIsAtMostOneEventASecond) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const auto r = compile(hf, "--log-format json --progress-interval 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  struct Last {
    int64_t done = -1;
    double elapsed = 0;
  };
  std::map<std::string, Last> last;  // per counted unit ("calib", "gptq", ...)
  int64_t counted = 0, events = 0;
  std::istringstream in(r.err);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    if (j["event"] != "progress" || !j.contains("done") || j.value("heartbeat", false)) continue;
    const int64_t done = j["done"].get<int64_t>(), total = j["total"].get<int64_t>();
    const double elapsed = j["elapsed_s"].get<double>();
    Last& l = last[j["stage"].get<std::string>()];
    ++events;
    if (done > l.done && l.done >= 0) {
      counted += done - l.done;
      // Between the first and the last count of a unit, events are a second apart.
      if (done < total) {
        EXPECT_GE(elapsed - l.elapsed, 0.95) << line;
      }
    } else {
      counted += done;
    }
    l = Last{done, elapsed};
  }
  ASSERT_GT(counted, 0) << r.err;
  // One event per counted sample would make these equal (before the limit: 123 events here).
  EXPECT_LT(events, counted) << r.err;
}

}  // namespace
}  // namespace qbc
