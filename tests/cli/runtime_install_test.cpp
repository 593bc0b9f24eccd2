// The installable runtime: `cmake --install` of the runtime component into a temporary prefix,
// examples/generate configured and built against it with find_package(qbc_runtime) as a
// separate project, and its greedy continuation of stories260K (compiled by `qbc compile`)
// equal to what `qbc run` prints for the same prompt. Also the GGUF route: `qbc compile` of
// stories260K.gguf writes the vocabulary as the qbc_vocab.json asset, and `qbc run` of that MXQ
// prints the same text as the HF-compiled one. Both texts, and the example's, are llama.cpp's
// golden greedy text, also from the one-word prompt "Once" (the first generated word keeps
// its space).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "stories_golden.h"
#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::run_command;
using ::qbc::testing::run_qbc;
using ::qbc::testing::shell_quote;
using ::qbc::testing::temp_dir;

const char* kPrompt = "Once upon a time";

/// `qbc compile` of `source` to `out`, calibrated on 8 windows of 64 tokens of TinyStories
/// text (`qbc calib prepare`): so calibrated, the W8 model follows llama.cpp's greedy path for
/// the whole golden text (random-token calibration leaves it after 24 tokens).
testing::RunResult compile(const fs::path& source, const fs::path& out) {
  const fs::path calib = out.parent_path() / (out.stem().string() + "-calib");
  const testing::RunResult prepared =
      run_qbc("calib prepare " + shell_quote(source) + " --text " +
              shell_quote(testing::shared_dir() / "data/tinystories/calib.clean.txt") +
              " --seq-len 64 --num-samples 8 -o " + shell_quote(calib));
  if (prepared.exit_code != 0) return prepared;
  return run_qbc("compile " + shell_quote(source) + " --preset llm_fast --calib " +
                 shell_quote(calib) +
                 " --set llm.attributes.maxSequenceLength=64"
                 " --set llm.attributes.maxCacheLength=64 -o " +
                 shell_quote(out));
}

/// What `qbc run` prints for `prompt` and `n` new tokens (generation stops at EOS).
std::string qbc_run_text(const fs::path& mxq, const std::string& prompt = kPrompt, int n = 32) {
  const auto r =
      run_qbc("run " + shell_quote(mxq) + " -p '" + prompt + "' -n " + std::to_string(n));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

TEST(RuntimeInstall, ExampleBuiltAgainstTheInstalledPackagePrintsQbcRunsText) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  QBC_REQUIRE_SHARED(text, "data/tinystories/calib.clean.txt");
  const fs::path dir = temp_dir();
  const fs::path prefix = dir / "prefix";
  const std::string cmake = shell_quote(QBC_CMAKE);
  auto r = run_command(cmake + " --install " + shell_quote(QBC_BUILD_DIR) +
                       " --component runtime --prefix " + shell_quote(prefix));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(fs::exists(prefix / "include/qbc/runtime/generator.h"));
  EXPECT_TRUE(fs::exists(prefix / "include/qbc/proto/mxq_meta.pb.h"));
  EXPECT_TRUE(fs::exists(prefix / "lib/cmake/qbc_runtime/qbc_runtimeConfig.cmake"));
  // Only the runtime's closure: no compiler library.
  EXPECT_FALSE(fs::exists(prefix / "lib/libqbc_quant.a"));
  EXPECT_FALSE(fs::exists(prefix / "include/qbc/npu"));

  const std::string launcher = QBC_CXX_LAUNCHER;
  r = run_command(
      cmake + " -S " + shell_quote(testing::source_dir() / "examples/generate") + " -B " +
      shell_quote(dir / "example") + " -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=" +
      shell_quote(prefix) + (launcher.empty() ? "" : " -DCMAKE_CXX_COMPILER_LAUNCHER=" + launcher));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  r = run_command(cmake + " --build " + shell_quote(dir / "example") + " -j1");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;

  const fs::path mxq = dir / "q.mxq";
  r = compile(hf, mxq);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string want = qbc_run_text(mxq);
  r = run_command(shell_quote(dir / "example/qbc-generate") + " " + shell_quote(mxq) + " '" +
                  kPrompt + "' 32");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(r.out.size(), std::string(kPrompt).size() + 20) << r.out;
  EXPECT_EQ(r.out.rfind(kPrompt, 0), 0u) << r.out;
  EXPECT_EQ(r.out, want);
  // llama.cpp's text, also after a one-word prompt, through qbc run and the example.
  const fs::path stories = hf.parent_path();
  const std::string golden = testing::stories260k_greedy_text(stories);
  const int after_once = testing::stories260k_tokens_after_once(stories);
  EXPECT_EQ(want, golden + "\n");
  EXPECT_EQ(qbc_run_text(mxq, "Once", after_once), golden + "\n");
  r = run_command(shell_quote(dir / "example/qbc-generate") + " " + shell_quote(mxq) + " Once " +
                  std::to_string(after_once));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, golden + "\n");
  // A file that is not a model: the example reports the runtime's located error.
  r = run_command(shell_quote(dir / "example/qbc-generate") + " " +
                  shell_quote(hf / "config.json") + " x 4");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "config.json")) << r.err;
}

TEST(RuntimeInstall, GgufCompiledMxqRunsWithItsVocabularyAsset) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  QBC_REQUIRE_SHARED(gguf, "models/stories260k/stories260K.gguf");
  QBC_REQUIRE_SHARED(text, "data/tinystories/calib.clean.txt");
  const fs::path dir = temp_dir();
  auto r = compile(gguf, dir / "g.mxq");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = compile(hf, dir / "h.mxq");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_qbc("inspect " + shell_quote(dir / "g.mxq"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "qbc_vocab.json")) << r.out;
  const std::string from_gguf = qbc_run_text(dir / "g.mxq");
  EXPECT_GT(from_gguf.size(), std::string(kPrompt).size() + 20) << from_gguf;
  EXPECT_EQ(from_gguf, qbc_run_text(dir / "h.mxq"));
  EXPECT_EQ(
      qbc_run_text(dir / "g.mxq", "Once", testing::stories260k_tokens_after_once(hf.parent_path())),
      testing::stories260k_greedy_text(hf.parent_path()) + "\n");
}

}  // namespace
}  // namespace qbc
