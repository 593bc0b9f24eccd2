// End-to-end tests of the qbc binary's command line: exit codes, help, version,
// dump-config acceptance items, output files and the JSON event channel.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "test_support.h"

namespace qbc {
namespace {

using ::qbc::testing::run_qbc;
using ::qbc::testing::temp_dir;
using ::qbc::testing::write_file;

TEST(Cli, HelpListsOnlyImplementedCommandsAndExitCodes) {
  auto r = run_qbc("--help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* cmd : {"dump-config", "presets", "targets"}) {
    EXPECT_NE(r.out.find(cmd), std::string::npos) << cmd;
  }
  EXPECT_NE(r.out.find("70 internal error"), std::string::npos);
  auto sub = run_qbc("dump-config --help");
  EXPECT_EQ(sub.exit_code, 0);
  for (const char* opt : {"--preset", "--config", "--set", "--output", "--format", "--origins"}) {
    EXPECT_NE(sub.out.find(opt), std::string::npos) << opt;
  }
}

TEST(Cli, VersionPrintsBuildInfo) {
  auto r = run_qbc("--version");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out.rfind("qbc 0.", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("protobuf"), std::string::npos);
  EXPECT_NE(r.out.find("build:"), std::string::npos);
}

TEST(Cli, BadUsageExits2) {
  EXPECT_EQ(run_qbc("").exit_code, 2);
  EXPECT_EQ(run_qbc("no-such-command").exit_code, 2);
  EXPECT_EQ(run_qbc("dump-config --format xml").exit_code, 2);
}

TEST(Cli, DumpConfigLlmPresetJson) {
  auto r = run_qbc("dump-config --preset llm --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["llm"]["apply"], true);
  EXPECT_EQ(j["llm"]["attributes"]["maxSequenceLength"], 4096);
  EXPECT_EQ(j["llm"]["attributes"]["maxCacheLength"], 4096);
  EXPECT_EQ(j["llm"]["attributes"]["calibration"]["useFullSeqLength"], true);
  EXPECT_EQ(j["calibration"]["mode"], 0);
  EXPECT_EQ(j["calibration"]["output"], 0);
  for (const char* t : {"qk", "ud", "vo", "spinR1", "spinR2", "optimizeFfn"}) {
    EXPECT_EQ(j["equivalentTransformation"][t]["apply"], true) << t;
  }
  auto fast = nlohmann::json::parse(run_qbc("dump-config --preset llm_fast --format json").out);
  for (const char* t : {"qk", "ud", "vo", "spinR1", "spinR2", "optimizeFfn"}) {
    EXPECT_EQ(fast["equivalentTransformation"][t]["apply"], false) << t;
  }
  EXPECT_EQ(fast["llm"]["attributes"]["calibration"]["useFullSeqLength"], false);
  auto mm = nlohmann::json::parse(run_qbc("dump-config --preset multimodal --format json").out);
  EXPECT_EQ(mm["calibration"]["method"], 3);
  EXPECT_EQ(mm["llm"]["apply"], true);
}

TEST(Cli, MisspelledKeyExits2WithSuggestion) {
  const auto cfg = temp_dir() / "typo.yaml";
  write_file(cfg, "llm:\n  attributes:\n    maxSequenceLenght: 8192\n");
  auto r = run_qbc("dump-config -c '" + cfg.string() + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("maxSequenceLenght"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("maxSequenceLength"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("typo.yaml:3:5"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
}

TEST(Cli, DumpedOutputLoadsBackUnchanged) {
  const auto dir = temp_dir();
  auto a = run_qbc("dump-config --preset llm --set splitParts=2 -o '" + (dir / "a.yaml").string() + "'");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  auto b = run_qbc("dump-config -c '" + (dir / "a.yaml").string() + "' -o '" + (dir / "b.json").string() + "'");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  auto c = run_qbc("dump-config -c '" + (dir / "b.json").string() + "' --format yaml");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(c.out, ::qbc::testing::read_file(dir / "a.yaml"));
}

TEST(Cli, FailedRunLeavesNoOutputFile) {
  const auto dir = temp_dir();
  auto r = run_qbc("dump-config --set splitBlocks=[4,2] -o '" + (dir / "out.yaml").string() + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_FALSE(std::filesystem::exists(dir / "out.yaml"));
  EXPECT_TRUE(std::filesystem::is_empty(dir));
  auto missing = run_qbc("dump-config -o /nonexistent-dir/out.yaml");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("/nonexistent-dir"), std::string::npos) << missing.err;
}

TEST(Cli, PrecedenceFlagsOverSetOverFileOverPreset) {
  const auto cfg = temp_dir() / "seed.yaml";
  write_file(cfg, "seed: 1\ninferenceScheme: global4\n");
  auto r = run_qbc("dump-config --preset llm -c '" + cfg.string() +
                   "' --set seed=2 --seed 3 --inference-scheme global8 --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["seed"], 3);
  EXPECT_EQ(j["inferenceScheme"], "global8");
  EXPECT_EQ(j["llm"]["apply"], true);
}

TEST(Cli, OriginsNameTheirSource) {
  auto r = run_qbc("dump-config --preset llm --set seed=5 --origins");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("seed = 5"), std::string::npos);
  EXPECT_NE(r.out.find("# --set seed=5"), std::string::npos);
  EXPECT_NE(r.out.find("configs/presets/llm.yaml:"), std::string::npos);
}

TEST(Cli, BatchLlmWarnsAboutAutomaticScheme) {
  auto r = run_qbc("dump-config --set llm.attributes.runtime.batchSize=4 --format json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("inferenceScheme set to 'single'"), std::string::npos) << r.err;
  EXPECT_EQ(run_qbc("dump-config --set llm.attributes.runtime.batchSize=4 --inference-scheme multi").exit_code, 2);
}

TEST(Cli, JsonEventsAreOneObjectPerLine) {
  auto ok = run_qbc("--log-format json dump-config --preset llm");
  ASSERT_EQ(ok.exit_code, 0);
  std::istringstream lines(ok.err);
  int results = 0;
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line);  // throws (fails the test) if not JSON
    if (j["event"] == "result") {
      ++results;
      EXPECT_EQ(j["result"]["llm"]["apply"], true);
    }
  }
  EXPECT_EQ(results, 1);
  auto bad = run_qbc("--log-format json dump-config --set seed=-1");
  EXPECT_EQ(bad.exit_code, 2);
  auto j = nlohmann::json::parse(bad.err.substr(0, bad.err.find('\n')));
  EXPECT_EQ(j["event"], "error");
  EXPECT_EQ(j["exit_code"], 2);
  EXPECT_NE(j["message"].get<std::string>().find("seed"), std::string::npos);
}

TEST(Cli, PresetsAndTargetsList) {
  auto p = run_qbc("presets");
  ASSERT_EQ(p.exit_code, 0);
  for (const char* n : {"llm ", "llm_fast", "multimodal"}) EXPECT_NE(p.out.find(n), std::string::npos) << n;
  auto t = run_qbc("targets aries-rb");
  ASSERT_EQ(t.exit_code, 0);
  EXPECT_NE(t.out.find("[fact]"), std::string::npos);
  EXPECT_NE(t.out.find("[assumption]"), std::string::npos);
  EXPECT_EQ(run_qbc("targets nosuch").exit_code, 2);
}

TEST(Cli, ReferenceMatchesDocs) {
  auto r = run_qbc("dump-config --reference");
  ASSERT_EQ(r.exit_code, 0);
  const std::string doc = ::qbc::testing::read_file(::qbc::testing::source_dir() / "docs/config.md");
  EXPECT_NE(doc.find(r.out), std::string::npos) << "docs/config.md is stale: run tools/update-docs.sh";
}

}  // namespace
}  // namespace qbc
