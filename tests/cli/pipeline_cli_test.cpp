// qbc quantize's pass-manager options: --print-pipeline, --disable-pass, --dump-after,
// the summary line, and the smoke-test defaults of --use-random-calib.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::run_qbc;
using ::qbc::testing::shell_quote;
using ::qbc::testing::temp_dir;

/// The pass names of a --print-pipeline table, in order.
std::vector<std::string> passes_of(const std::string& table) {
  std::vector<std::string> out;
  std::istringstream in(table);
  std::string line;
  std::getline(in, line);  // title
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream row(line);
    std::string index, name;
    row >> index >> name;
    if (!name.empty()) out.push_back(name);
  }
  return out;
}

TEST(PipelineCli, PrintPipelineListsPassesWithTheirKeys) {
  auto r = run_qbc("quantize --print-pipeline --preset llm");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> passes = passes_of(r.out);
  ASSERT_GE(passes.size(), 4u) << r.out;
  EXPECT_EQ(passes.front(), "spinR1Check") << r.out;
  EXPECT_EQ(passes.back(), "quantizeRtn") << r.out;
  EXPECT_TRUE(contains(r.out, "equivalentTransformation.spinR2.apply")) << r.out;
  // --disable-pass spinR2 marks exactly that pass.
  auto d = run_qbc("quantize --print-pipeline --preset llm --disable-pass spinR2");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  size_t marks = 0;
  std::istringstream in(d.out);
  for (std::string line; std::getline(in, line);) {
    if (contains(line, "(disabled by --disable-pass)")) {
      ++marks;
      EXPECT_TRUE(contains(line, " spinR2 ")) << line;
    }
  }
  EXPECT_EQ(marks, 1u) << d.out;
  // The llm_fast pipeline has no transforms.
  auto fast = run_qbc("quantize --print-pipeline --preset llm_fast");
  ASSERT_EQ(fast.exit_code, 0) << fast.err;
  EXPECT_EQ(passes_of(fast.out), (std::vector<std::string>{"calibrate", "quantizeRtn"}))
      << fast.out;
}

TEST(PipelineCli, BadDisablePassNamesExit2BeforeAnyWork) {
  auto unknown = run_qbc("quantize --print-pipeline --preset llm --disable-pass spinR9");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_TRUE(contains(unknown.err, "--disable-pass spinR9: no such pass")) << unknown.err;
  auto fixed = run_qbc("quantize --print-pipeline --preset llm --disable-pass calibrate");
  EXPECT_EQ(fixed.exit_code, 2);
  EXPECT_TRUE(contains(fixed.err, "cannot be disabled")) << fixed.err;
}

// The acceptance flow on the built-in tiny model: --disable-pass removes exactly the pass,
// --dump-after all writes one text MBLT per pass that ran, each readable by inspect; the
// command ends with its summary line; random calibration runs on the smoke-test defaults.
TEST(PipelineCli, DisableAndDumpAfterAllOnTheTinyModel) {
  const fs::path dir = temp_dir();
  ASSERT_EQ(run_qbc("random-model --tiny -o " + shell_quote(dir / "tiny")).exit_code, 0);
  auto list =
      run_qbc("quantize --print-pipeline --preset llm --use-random-calib --disable-pass spinR2");
  ASSERT_EQ(list.exit_code, 0) << list.err;
  // "NN-pass.mblt.txt", NN the pass's position in the whole pipeline (spinR2's is skipped).
  std::vector<std::string> expected;
  const std::vector<std::string> all = passes_of(list.out);
  for (size_t i = 0; i < all.size(); ++i) {
    char prefix[24];
    std::snprintf(prefix, sizeof(prefix), "%02zu-", i + 1);
    if (all[i] != "spinR2") expected.push_back(prefix + all[i] + ".mblt.txt");
  }
  auto q = run_qbc(
      "quantize " + shell_quote(dir / "tiny") +
      " --preset llm --use-random-calib --disable-pass spinR2 --dump-after all --dump-dir " +
      shell_quote(dir / "dumps") + " -o " + shell_quote(dir / "q.mblt"));
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_TRUE(contains(q.err, "qbc quantize: wrote ")) << q.err;
  EXPECT_TRUE(contains(q.err, "calibrated on 8 samples")) << q.err;
  EXPECT_TRUE(
      contains(q.err, "useRandomCalib is a smoke test: calibrating on 8 samples of 256 tokens"))
      << q.err;
  std::vector<std::string> dumped;
  for (const auto& e : fs::directory_iterator(dir / "dumps"))
    dumped.push_back(e.path().filename().string());
  std::sort(dumped.begin(), dumped.end());
  EXPECT_EQ(dumped, expected);
  for (size_t i = 0; i < dumped.size(); ++i) {
    auto inspect = run_qbc("inspect --json " + shell_quote(dir / "dumps" / dumped[i]));
    ASSERT_EQ(inspect.exit_code, 0) << dumped[i] << ": " << inspect.err;
    EXPECT_TRUE(nlohmann::json::parse(inspect.out).contains("nodes")) << inspect.out;
  }
  // The dump after the last pass is the quantized graph the command wrote (which adds
  // only metadata: producer, config, calibration provenance).
  const auto last = nlohmann::json::parse(
      run_qbc("inspect --json " + shell_quote(dir / "dumps" / dumped.back())).out);
  const auto written =
      nlohmann::json::parse(run_qbc("inspect --json " + shell_quote(dir / "q.mblt")).out);
  EXPECT_EQ(last["nodes"], written["nodes"]);
  EXPECT_TRUE(contains(run_qbc("inspect --graph " + shell_quote(dir / "dumps" / dumped.back())).out,
                       "qlinear"));
}

TEST(PipelineCli, QuietSilencesSummaryAndUnknownDumpNamesExit2) {
  const fs::path dir = temp_dir();
  ASSERT_EQ(run_qbc("random-model --tiny -o " + shell_quote(dir / "tiny")).exit_code, 0);
  auto q = run_qbc("-q quantize " + shell_quote(dir / "tiny") +
                   " --preset llm_fast --use-random-calib -o " + shell_quote(dir / "q.mblt"));
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_EQ(q.err, "");
  EXPECT_TRUE(fs::exists(dir / "q.mblt"));
  auto bad = run_qbc("quantize " + shell_quote(dir / "tiny") +
                     " --preset llm_fast --use-random-calib --dump-after qk -o " +
                     shell_quote(dir / "r.mblt"));
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(contains(bad.err, "--dump-after qk: not a pass of this pipeline")) << bad.err;
  EXPECT_FALSE(fs::exists(dir / "r.mblt"));
}

TEST(PipelineCli, JsonEventsCarrySummaryAndSteps) {
  const fs::path dir = temp_dir();
  ASSERT_EQ(run_qbc("random-model --tiny -o " + shell_quote(dir / "tiny")).exit_code, 0);
  auto q = run_qbc("--log-format json quantize " + shell_quote(dir / "tiny") +
                   " --preset llm_fast --use-random-calib -o " + shell_quote(dir / "q.mblt"));
  ASSERT_EQ(q.exit_code, 0) << q.err;
  bool step = false, summary = false;
  std::istringstream in(q.err);
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    if (j["event"] == "progress" && j.contains("step")) {
      step = true;
      EXPECT_EQ(j["steps"], 2);
      EXPECT_TRUE(j["pass"] == "calibrate" || j["pass"] == "quantizeRtn") << line;
    }
    if (j["event"] == "summary") {
      summary = true;
      EXPECT_EQ(j["command"], "quantize");
      EXPECT_GT(j["result"]["sidecar_bytes"].get<int64_t>(), 0) << line;
      EXPECT_EQ(j["result"]["samples"], 8) << line;
    }
  }
  EXPECT_TRUE(step) << q.err;
  EXPECT_TRUE(summary) << q.err;
}

}  // namespace
}  // namespace qbc
