// MXQ from the command line: qbc compile writes it (single file, or a manifest and parts
// with splitParts / splitBlocks), qbc run/eval on it give exactly the fake-quant
// evaluator's tokens and accuracy figures, the bytes do not depend on the thread count, the
// configuration read back by dump-config recompiles to the same bytes, and inspect / verify
// report on it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::read_file;
using ::qbc::testing::run_qbc;
using ::qbc::testing::shell_quote;
using ::qbc::testing::temp_dir;

fs::path hf() { return testing::shared_dir() / "models/stories260k/hf"; }

/// `qbc compile` of stories260K with `args` to dir/name.mxq, keeping the MBLT in dir.
testing::RunResult compile(const fs::path& dir, const std::string& name, const std::string& args) {
  fs::create_directories(dir);
  // Short calibration rows and a 512-position cache keep every configuration fast.
  return run_qbc("compile " + shell_quote(hf()) + " --use-random-calib " + args +
                 " --set calibration.numSamples=4 --set calibration.seqLength=128"
                 " --set llm.attributes.calibration.useFullSeqLength=false"
                 " --set llm.attributes.maxSequenceLength=512"
                 " --set llm.attributes.maxCacheLength=512 -o " +
                 shell_quote(dir / (name + ".mxq")) + " --keep-intermediate " + shell_quote(dir));
}

std::string greedy_ids(const fs::path& model) {
  const auto r = run_qbc("run " + shell_quote(model) + " -p 'Once upon a time' -n 32 --ids");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const size_t at = r.out.find("new ids:");
  EXPECT_NE(at, std::string::npos) << r.out;
  return at == std::string::npos ? "" : r.out.substr(at);
}

nlohmann::json eval_json(const fs::path& model) {
  const fs::path text = testing::shared_dir() / "data/tinystories/eval.clean.txt";
  const auto r = run_qbc("eval " + shell_quote(model) + " --reference " + shell_quote(hf()) +
                         " --text " + shell_quote(text) + " --ctx 256 --chunks 12 --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out, nullptr, false);
}

struct Case {
  const char* name;
  const char* args;
};

class MxqCli : public ::testing::TestWithParam<Case> {};

TEST_P(MxqCli, RunAndEvalEqualTheFakeQuantEvaluatorSingleAndSplit) {
  QBC_REQUIRE_SHARED(model, "models/stories260k/hf");
  QBC_REQUIRE_SHARED(text, "data/tinystories/eval.clean.txt");
  const Case& c = GetParam();
  const fs::path dir = temp_dir() / "mxq_cli" / c.name;
  std::string args = c.args;
  if (args.find(".yaml") != std::string::npos)
    args = "-c " + shell_quote(testing::source_dir() / args);
  auto r = compile(dir, "q", args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.err, "wrote " + (dir / "q.mxq").string())) << r.err;
  const std::string want_ids = greedy_ids(dir / "q.mblt");
  const nlohmann::json want = eval_json(dir / "q.mblt");
  ASSERT_FALSE(want.is_discarded());
  for (const char* split : {"", "--set splitParts=2", "--set 'splitBlocks=[1, 3]'"}) {
    SCOPED_TRACE(split);
    fs::path model = dir / "q.mxq";
    if (*split != '\0') {
      const std::string name = split[6] == 's' && split[11] == 'P' ? "parts" : "blocks";
      r = compile(dir / name, name, args + " " + split);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      model = dir / name / (name + ".mxq");
      const size_t parts = name == "parts" ? 2 : 3;
      for (size_t i = 1; i <= parts; ++i) {
        char part[64];
        std::snprintf(part, sizeof(part), "%s-%05zu-of-%05zu.mxq", name.c_str(), i, parts);
        EXPECT_TRUE(fs::exists(dir / name / part)) << part;
      }
    }
    EXPECT_EQ(greedy_ids(model), want_ids);
    const nlohmann::json got = eval_json(model);
    ASSERT_FALSE(got.is_discarded());
    for (const char* key :
         {"perplexity", "perplexity_reference", "kld_mean", "kld_p99", "kld_max", "top1"}) {
      ASSERT_TRUE(got.contains(key)) << key << " " << got.dump();
      EXPECT_EQ(got[key].dump(), want[key].dump()) << key;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, MxqCli,
                         ::testing::Values(Case{"w8_llm", "--preset llm"},
                                           Case{"w4v8", "configs/examples/w4v8.yaml"}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(MxqCliBytes, SameBytesForAnyThreadCountAndFromDumpConfig) {
  QBC_REQUIRE_SHARED(model, "models/stories260k/hf");
  const fs::path dir = temp_dir() / "mxq_cli_bytes";
  auto one = compile(dir / "one", "q", "--preset llm_fast --threads 1");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  auto two = compile(dir / "two", "q", "--preset llm_fast --threads 2");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  const std::string a = read_file(dir / "one/q.mxq");
  EXPECT_GT(a.size(), 4096u);
  EXPECT_TRUE(a == read_file(dir / "two/q.mxq")) << "1 and 2 threads differ";
  // No path of this machine is in the file.
  EXPECT_FALSE(contains(a, dir.string()));
  const auto d = run_qbc("dump-config " + shell_quote(dir / "one/q.mxq") + " -o " +
                         shell_quote(dir / "dumped.yaml"));
  ASSERT_EQ(d.exit_code, 0) << d.err;
  fs::create_directories(dir / "again");
  const auto again =
      run_qbc("compile " + shell_quote(hf()) + " -c " + shell_quote(dir / "dumped.yaml") + " -o " +
              shell_quote(dir / "again/q.mxq"));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(a == read_file(dir / "again/q.mxq")) << "dump-config did not recompile identically";
}

TEST(MxqCliTools, InspectAndVerifyReportTheFile) {
  QBC_REQUIRE_SHARED(model, "models/stories260k/hf");
  const fs::path dir = temp_dir() / "mxq_cli_tools";
  auto r = compile(dir, "q", "--preset llm_fast --set 'splitBlocks=[2]'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path m = dir / "q.mxq";
  auto v = run_qbc("verify " + shell_quote(m));
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_TRUE(contains(v.err, "ok (2 files")) << v.err;
  auto i = run_qbc("inspect " + shell_quote(m) + " --json");
  ASSERT_EQ(i.exit_code, 0) << i.err;
  const auto j = nlohmann::json::parse(i.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << i.out;
  EXPECT_EQ(j["parts"].size(), 2u);
  EXPECT_EQ(j["schemes"][0]["scheme"], "single");
  EXPECT_EQ(j["kv"].size(), 5u);  // stories260K: five attention layers, one KV entry each
  EXPECT_EQ(j["target"], "aries-rb");
  auto mem = run_qbc("inspect " + shell_quote(m) + " --memory --json");
  ASSERT_EQ(mem.exit_code, 0) << mem.err;
  EXPECT_TRUE(contains(mem.out, "\"kv_bytes\"")) << mem.out;
  // A part of another build in the manifest is refused, naming it.
  auto other = compile(dir / "other", "q", "--preset llm --set 'splitBlocks=[2]'");
  ASSERT_EQ(other.exit_code, 0) << other.err;
  fs::copy_file(dir / "other/q-00002-of-00002.mxq", dir / "q-00002-of-00002.mxq",
                fs::copy_options::overwrite_existing);
  v = run_qbc("verify " + shell_quote(m));
  EXPECT_EQ(v.exit_code, 2) << v.err;
  EXPECT_TRUE(contains(v.err, "q-00002-of-00002.mxq")) << v.err;
  // A missing part too.
  fs::remove(dir / "q-00002-of-00002.mxq");
  v = run_qbc("run " + shell_quote(m) + " -p Once -n 2");
  EXPECT_EQ(v.exit_code, 2) << v.err;
  EXPECT_TRUE(contains(v.err, "part 2 of 2 (q-00002-of-00002.mxq) is missing")) << v.err;
}

TEST(MxqCliErrors, BadSplitAndMbltOutputAreRefusedBeforeWork) {
  QBC_REQUIRE_SHARED(model, "models/stories260k/hf");
  const fs::path dir = temp_dir() / "mxq_cli_errors";
  auto r = compile(dir, "q", "--set 'splitBlocks=[9]'");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "splitBlocks")) << r.err;
  EXPECT_FALSE(contains(r.err, "qbc.calib")) << r.err;
  EXPECT_FALSE(fs::exists(dir / "q.mxq"));
  r = run_qbc("compile " + shell_quote(hf()) + " -o " + shell_quote(dir / "x.mblt"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "compile writes MXQ")) << r.err;
  // Not an MXQ.
  testing::write_file(dir / "junk.mxq", std::string("\x89QBCMXQ\n", 8) + std::string(200, 'x'));
  r = run_qbc("verify " + shell_quote(dir / "junk.mxq"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "junk.mxq")) << r.err;
}

}  // namespace
}  // namespace qbc
