// What commands echo (issue 28, "units and echoes"): compile's summary gives sizes in the
// binary units plan and inspect use; dump-config of an MXQ says what it wrote; inspect --cost
// names every row (no "(no node)") and ends with a total equal to the sum of its rows; a plan
// that does not fit prints its table once (stdout), with a one-line error.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::run_qbc;
using ::qbc::testing::shell_quote;
using ::qbc::testing::temp_dir;

/// stories260K compiled once for the file (fast settings): the MXQ and compile's result.
struct Compiled {
  fs::path mxq;
  testing::RunResult result;
};

const Compiled& compiled() {
  static const Compiled c = [] {
    Compiled out;
    const fs::path dir = temp_dir() / "echo";
    fs::create_directories(dir);
    out.mxq = dir / "q.mxq";
    out.result = run_qbc("compile " + shell_quote(testing::shared_dir() / "models/stories260k/hf") +
                         " --preset llm_fast --use-random-calib --set calibration.numSamples=2"
                         " --set calibration.seqLength=32"
                         " --set llm.attributes.calibration.useFullSeqLength=false"
                         " --set llm.attributes.maxSequenceLength=256"
                         " --set llm.attributes.maxCacheLength=256 --inference-scheme single -o " +
                         shell_quote(out.mxq));
    return out;
  }();
  return c;
}

TEST(EchoCli, CompileSummaryUsesTheBinaryUnitsOfPlanAndInspect) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const Compiled& c = compiled();
  ASSERT_EQ(c.result.exit_code, 0) << c.result.err;
  // "DRAM 2.3 MiB of 16.00 GiB, SRAM peak 41.0 KiB per core, program 12.1 KiB"
  const std::regex summary(
      "DRAM [0-9.]+ (B|KiB|MiB|GiB) of [0-9.]+ GiB, SRAM peak [0-9.]+ (B|KiB|MiB) per core, "
      "program [0-9.]+ (B|KiB|MiB)");
  EXPECT_TRUE(std::regex_search(c.result.err, summary)) << c.result.err;
  const std::regex decimal(" [0-9.]+ (KB|MB|GB)\\b");
  EXPECT_FALSE(std::regex_search(c.result.err, decimal)) << c.result.err;
  // The device size is the one plan prints for the same target.
  const auto plan = run_qbc("plan " + shell_quote(hf) + " --inference-scheme single");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(c.result.err, m, std::regex("of ([0-9.]+ GiB)"))) << c.result.err;
  EXPECT_TRUE(contains(plan.out, m[1].str())) << m[1].str() << "\n" << plan.out;
}

TEST(EchoCli, DumpConfigOfAnMxqSaysWhatItWrote) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const Compiled& c = compiled();
  ASSERT_EQ(c.result.exit_code, 0) << c.result.err;
  const fs::path out = temp_dir() / "out.yaml";
  auto r = run_qbc("dump-config " + shell_quote(c.mxq) + " -o " + shell_quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(fs::exists(out));
  EXPECT_TRUE(contains(r.err, "wrote " + out.string())) << r.err;
  EXPECT_TRUE(contains(r.err, std::to_string(fs::file_size(out)) + " bytes")) << r.err;
  EXPECT_TRUE(contains(r.err, c.mxq.string())) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  // -q silences it; to stdout there is nothing to announce.
  r = run_qbc("-q dump-config " + shell_quote(c.mxq) + " -o " + shell_quote(out));
  EXPECT_TRUE(r.err.empty()) << r.err;
  r = run_qbc("dump-config " + shell_quote(c.mxq));
  EXPECT_FALSE(contains(r.err, "wrote")) << r.err;
}

TEST(EchoCli, InspectCostNamesEveryRowAndEndsWithATotal) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const Compiled& c = compiled();
  ASSERT_EQ(c.result.exit_code, 0) << c.result.err;
  auto r = run_qbc("inspect " + shell_quote(c.mxq) + " --cost --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  ASSERT_EQ(j["schemes"].size(), 1u);
  const auto& s = j["schemes"][0];
  int64_t macs = 0, dram = 0;
  for (const auto& l : s["layers"]) {
    EXPECT_FALSE(l["node"].get<std::string>().empty()) << l.dump();
    macs += l["macs"].get<int64_t>();
    dram += l["dram_bytes"].get<int64_t>();
  }
  EXPECT_GT(macs, 0);
  EXPECT_EQ(s["decode_total"]["macs"].get<int64_t>(), macs);
  EXPECT_EQ(s["decode_total"]["dram_bytes"].get<int64_t>(), dram);
  EXPECT_GE(s["decode_total"]["us"].get<double>(), s["decode_total"]["core_us"].get<double>());

  r = run_qbc("inspect " + shell_quote(c.mxq) + " --cost");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(contains(r.out, "(no node)")) << r.out;
  EXPECT_TRUE(contains(r.out, "DRAM MiB")) << r.out;
  // The total row's MMACs is the sum of the node rows' (rows: "  %-34s %10.3f %10.3f ...").
  std::istringstream is(r.out);
  double sum = 0, total = -1;
  bool in_table = false;
  for (std::string line; std::getline(is, line);) {
    if (line.size() < 40) continue;
    std::string name = line.substr(2, 34);
    name.erase(name.find_last_not_of(' ') + 1);
    if (name == "node") {
      in_table = true;
      continue;
    }
    std::istringstream ls(line.substr(36));
    double mib = 0, mmacs = 0;
    if (!in_table || !(ls >> mib >> mmacs)) continue;
    if (name == "total") {
      total = mmacs;
      in_table = false;
    } else {
      sum += mmacs;
    }
  }
  EXPECT_GT(total, 0) << r.out;
  EXPECT_NEAR(total, sum, 0.001 * 60) << r.out;  // each row rounded to 0.001
  EXPECT_TRUE(contains(r.out, "host overhead")) << r.out;
}

TEST(EchoCli, NoFitPlanPrintsItsTableOnce) {
  QBC_REQUIRE_SHARED(dir, "model-configs/Llama-3.1-8B-Instruct");
  const auto r = run_qbc("plan " + shell_quote(dir) +
                         " --context 131072 --kv-bits 16 --inference-scheme single");
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_TRUE(contains(r.out, "DOES NOT FIT")) << r.out;
  EXPECT_TRUE(contains(r.out, "largest maxCacheLength that fits")) << r.out;
  const std::string both = r.out + r.err;
  size_t tables = 0;
  for (size_t at = both.find("kv cache"); at != std::string::npos;
       at = both.find("kv cache", at + 1))
    ++tables;
  EXPECT_EQ(tables, 1u) << both;
  EXPECT_TRUE(contains(r.err, "does not fit target")) << r.err;
  EXPECT_TRUE(contains(r.err, "see the plan above")) << r.err;
}

}  // namespace
}  // namespace qbc
