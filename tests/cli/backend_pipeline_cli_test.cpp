// qbc compile's pass-manager options reaching the backend (docs/npu.md
// "Pipelines"):
// --print-pipeline lists the npu-compile passes after the quant passes with the
// key that enables each, --disable-pass takes the backend's checks and refuses
// the passes that build the bundle, and --dump-after writes one readable dump
// per backend pass.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::read_file;
using ::qbc::testing::run_qbc;
using ::qbc::testing::shell_quote;
using ::qbc::testing::temp_dir;

/// The pass names of the table titled `title` in a --print-pipeline output, in
/// order.
std::vector<std::string> table(const std::string& out, const std::string& title) {
  std::vector<std::string> names;
  std::istringstream in(out);
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    if (line.rfind(title + " pipeline, ", 0) == 0) {
      inside = true;
      std::getline(in, line);  // the header
      continue;
    }
    if (inside && line.rfind("  ", 0) != 0) break;
    if (!inside) continue;
    std::istringstream row(line);
    std::string index, name;
    row >> index >> name;
    names.push_back(name);
  }
  return names;
}

TEST(BackendPipelineCli, CompilePrintsTheBackendPassesAfterTheQuantPasses) {
  auto r = run_qbc("compile --print-pipeline --preset llm --disable-pass check-context");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> quant = table(r.out, "quant");
  const std::vector<std::string> npu = table(r.out, "npu");
  ASSERT_FALSE(quant.empty()) << r.out;
  EXPECT_EQ(quant.back(), "quantizeRtn") << r.out;
  EXPECT_EQ(npu, (std::vector<std::string>{"plan-tiles", "plan-memory", "check-fit", "fill-weights",
                                           "lower", "assign-tokens", "check-context"}))
      << r.out;
  EXPECT_LT(r.out.find("quant pipeline"), r.out.find("npu pipeline")) << r.out;
  EXPECT_TRUE(contains(r.out, "inferenceScheme")) << r.out;  // lower's key
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    if (contains(line, "(disabled by --disable-pass)"))
      EXPECT_TRUE(contains(line, " check-context ")) << line;
  }
  EXPECT_TRUE(contains(r.out, "(disabled by --disable-pass)")) << r.out;
  // qbc quantize has no backend: its table stays the quant one, and it refuses
  // npu names.
  auto q = run_qbc("quantize --print-pipeline --preset llm");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_FALSE(contains(q.out, "npu pipeline")) << q.out;
  EXPECT_EQ(
      run_qbc("quantize --print-pipeline --preset llm --disable-pass check-context").exit_code, 2);
}

TEST(BackendPipelineCli, OnlyTheBackendChecksCanBeDisabled) {
  auto r = run_qbc("compile --print-pipeline --preset llm --disable-pass lower");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "--disable-pass lower")) << r.err;
  r = run_qbc(
      "compile --print-pipeline --preset llm --dump-after "
      "nothing-of-that-name");
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
}

TEST(BackendPipelineCli, DumpAfterAllWritesOneDumpPerBackendPass) {
  QBC_REQUIRE_SHARED(model, "models/stories260k/hf");
  const fs::path dir = temp_dir() / "backend_dumps";
  fs::create_directories(dir);
  auto r = run_qbc("compile " + shell_quote(model) +
                   " --preset llm_fast --use-random-calib --set calibration.numSamples=2"
                   " --set calibration.seqLength=32 --set llm.attributes.maxCacheLength=256"
                   " --set llm.attributes.maxSequenceLength=256"
                   " --disable-pass check-context --dump-after all --dump-dir " +
                   shell_quote(dir / "dumps") + " -o " + shell_quote(dir / "q.mxq"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path d = dir / "dumps";
  const char* written[] = {"01-plan-tiles",   "02-plan-memory", "03-check-fit",
                           "04-fill-weights", "05-lower",       "06-assign-tokens"};
  for (const char* name : written)
    EXPECT_TRUE(fs::exists(d / (std::string(name) + ".npu.txt"))) << name;
  EXPECT_FALSE(fs::exists(d / "07-check-context.npu.txt"));  // disabled
  const std::string tiles = read_file(d / "01-plan-tiles.npu.txt");
  EXPECT_TRUE(contains(tiles, "qlinear")) << tiles;
  const std::string memory = read_file(d / "02-plan-memory.npu.txt");
  EXPECT_TRUE(contains(memory, "kcache: kv at")) << memory;
  const std::string tokens = read_file(d / "06-assign-tokens.npu.txt");
  EXPECT_TRUE(contains(tokens, "wait=")) << tokens.substr(0, 2000);
  // The quant dumps sit beside them (MBLT text).
  bool mblt = false;
  for (const auto& e : fs::directory_iterator(d))
    mblt = mblt || contains(e.path().string(), ".mblt.txt");
  EXPECT_TRUE(mblt);
}

}  // namespace
}  // namespace qbc
