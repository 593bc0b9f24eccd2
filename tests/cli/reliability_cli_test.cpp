// Issue 29 from the command line: `qbc dump-config` of a compile config holding bytes outside
// UTF-8 exits 2 naming file:line:column (it used to exit 70 printing the resolved config), also
// with JSON events; and the KV-cache door of `qbc run`: a cache saved after the prompt
// (--save-cache), loaded by another process (--load-cache), continues with the tokens of an
// uninterrupted run without running the cached prompt again, while a corrupt, truncated or
// foreign cache file exits 2 naming what differs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::read_file;
using ::qbc::testing::run_qbc;
using ::qbc::testing::shell_quote;
using ::qbc::testing::temp_dir;
using ::qbc::testing::write_file;

TEST(ReliabilityCli, DumpConfigOfANonUtf8ConfigExits2WithTheLocation) {
  const fs::path cfg = temp_dir() / "bad-utf8.yaml";
  write_file(cfg, "seed: 3\ncalibDataPaths: [\"ab\xff\"]\n");
  for (const char* events : {"", "--log-format json "}) {
    SCOPED_TRACE(events);
    auto r = run_qbc(std::string(events) + "dump-config -c " + shell_quote(cfg));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(contains(r.err, cfg.string() + ":2:21: the text is not valid UTF-8 (byte 0xFF)"))
        << r.err;
  }
  auto r = run_qbc("dump-config --set 'calibDataPaths=[\"a\xfe\"]'");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  // The argument is refused before the command runs, naming it (tools/qbc/main.cpp); the
  // schema's own "calibDataPaths[0]: the value is not valid UTF-8" is the API's backstop.
  EXPECT_TRUE(
      contains(r.err, "command-line argument 3 'calibDataPaths=[\"a\\xFE\"]' is not valid UTF-8"))
      << r.err;
}

fs::path hf() { return testing::shared_dir() / "models/stories260k/hf"; }

/// stories260K compiled to dir/name.mxq (W8, llm_fast, random calibration) with `args`.
fs::path compile(const fs::path& dir, const std::string& name, const std::string& args) {
  const fs::path out = dir / (name + ".mxq");
  auto r = run_qbc("compile " + shell_quote(hf()) + " --preset llm_fast --use-random-calib" +
                   " --set calibration.numSamples=2 --set calibration.seqLength=32" +
                   " --set llm.attributes.calibration.useFullSeqLength=false " + args + " -o " +
                   shell_quote(out));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return out;
}

std::string new_ids(const testing::RunResult& r) {
  const size_t at = r.out.find("new ids:");
  return at == std::string::npos ? "" : r.out.substr(at);
}

TEST(ReliabilityCli, RunSaveAndLoadCacheContinuesLikeAnUninterruptedRun) {
  QBC_REQUIRE_SHARED(model, "models/stories260k/hf");
  const fs::path dir = temp_dir() / "reliability_cli";  // temp_dir() is a new folder per call
  fs::create_directories(dir);
  const fs::path q = compile(dir, "q",
                             "--set llm.attributes.maxCacheLength=128"
                             " --set llm.attributes.maxSequenceLength=128");
  const std::string prompt = " -p 'Once upon a time, there was a little girl' ";
  const std::string sampling = " --temperature 0.8 --top-k 40 --seed 5 ";
  auto whole = run_qbc("run " + shell_quote(q) + prompt + "-n 24 --ids" + sampling);
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  ASSERT_FALSE(new_ids(whole).empty()) << whole.out;

  const fs::path cache = dir / "prompt.seq";
  auto save = run_qbc("run " + shell_quote(q) + prompt + "-n 0 --save-cache " + shell_quote(cache));
  ASSERT_EQ(save.exit_code, 0) << save.err;
  ASSERT_TRUE(fs::exists(cache));
  auto resumed = run_qbc("--log-format json run " + shell_quote(q) + prompt + "-n 24 --ids" +
                         sampling + "--load-cache " + shell_quote(cache));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(new_ids(resumed), new_ids(whole));
  // The result event says how much of the prompt came from the cache: all but its last token.
  int64_t cached = -1, prompt_tokens = 0;
  std::istringstream lines(resumed.err);
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_discarded() || e.value("event", "") != "result") continue;
    cached = e["result"].value("cached_prompt_tokens", int64_t{-1});
    prompt_tokens = static_cast<int64_t>(e["result"]["prompt_tokens"].size());
  }
  EXPECT_GT(prompt_tokens, 1);
  EXPECT_EQ(cached, prompt_tokens - 1) << resumed.err;

  // Damaged files: exit 2 naming the file and what is wrong; nothing is generated.
  const std::string good = read_file(cache);
  const fs::path bad = dir / "bad.seq";
  auto load_bad = [&](const std::string& bytes) {
    write_file(bad, bytes);
    return run_qbc("run " + shell_quote(q) + prompt + "-n 4 --load-cache " + shell_quote(bad));
  };
  std::string flipped = good;
  flipped[good.size() / 2] ^= 0x01;
  for (const auto& [bytes, what] :
       {std::pair<std::string, std::string>{flipped, "corrupt: the digest it stores is "},
        {good.substr(0, good.size() - 7), "truncated"},
        {good + "x", "trailing bytes"},
        {"not a cache", "not a qbc sequence cache"}}) {
    SCOPED_TRACE(what);
    auto r = load_bad(bytes);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(contains(r.err, bad.string() + ": " + what)) << r.err;
  }
  // A cache of another model (another cache length: another KV layout).
  const fs::path other = compile(dir, "other",
                                 "--set llm.attributes.maxCacheLength=64"
                                 " --set llm.attributes.maxSequenceLength=64");
  const fs::path foreign = dir / "other.seq";
  ASSERT_EQ(
      run_qbc("run " + shell_quote(other) + prompt + "-n 0 --save-cache " + shell_quote(foreign))
          .exit_code,
      0);
  auto r = run_qbc("run " + shell_quote(q) + prompt + "-n 4 --load-cache " + shell_quote(foreign));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(
      contains(r.err, foreign.string() + ": the KV cache blob is of another model's KV layout"))
      << r.err;
  // The door is for compiled models only.
  r = run_qbc("run " + shell_quote(hf()) + prompt + "-n 1 --save-cache " + shell_quote(bad));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "apply to compiled .mxq models")) << r.err;
}

}  // namespace
}  // namespace qbc
