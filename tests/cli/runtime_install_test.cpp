// The installable runtime: `cmake --install` of the runtime component into a temporary prefix,
// examples/generate configured and built against it with find_package(qbc_runtime) as a
// separate project, and its greedy continuation of stories260K (compiled by `qbc compile`)
// equal to what `qbc run` prints for the same prompt. Also the GGUF route: `qbc compile` of
// stories260K.gguf writes the vocabulary as the qbc_vocab.json asset, and `qbc run` of that MXQ
// prints the same text as the HF-compiled one.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

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

testing::RunResult compile(const fs::path& source, const fs::path& out) {
  return run_qbc("compile " + shell_quote(source) +
                 " --preset llm_fast --use-random-calib --set calibration.numSamples=2"
                 " --set calibration.seqLength=32 --set llm.attributes.maxSequenceLength=64"
                 " --set llm.attributes.maxCacheLength=64 -o " +
                 shell_quote(out));
}

/// The text `qbc run` prints after the prompt (its first line; generation stops at EOS).
std::string qbc_run_text(const fs::path& mxq) {
  const auto r = run_qbc("run " + shell_quote(mxq) + " -p '" + kPrompt + "' -n 32");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

TEST(RuntimeInstall, ExampleBuiltAgainstTheInstalledPackagePrintsQbcRunsText) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
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
  // A file that is not a model: the example reports the runtime's located error.
  r = run_command(shell_quote(dir / "example/qbc-generate") + " " +
                  shell_quote(hf / "config.json") + " x 4");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "config.json")) << r.err;
}

TEST(RuntimeInstall, GgufCompiledMxqRunsWithItsVocabularyAsset) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  QBC_REQUIRE_SHARED(gguf, "models/stories260k/stories260K.gguf");
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
}

}  // namespace
}  // namespace qbc
