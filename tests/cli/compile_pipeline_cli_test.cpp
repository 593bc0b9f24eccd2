// qbc compile and qbc quantize as the driver's pipeline of stages (src/driver/compile.cpp):
// the stages each run, the quantized graph handed to the backend in memory (the MBLT written
// only when asked for, the MXQ the same either way), and the stage rows of --print-pipeline.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "json_events.h"
#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::read_file;
using ::qbc::testing::run_qbc;
using ::qbc::testing::RunResult;
using ::qbc::testing::shell_quote;
using ::qbc::testing::temp_dir;
using Json = nlohmann::json;

const char* kFlags =
    " --preset llm_fast --use-random-calib --set llm.attributes.maxCacheLength=256"
    " --set llm.attributes.maxSequenceLength=256 --log-format json";

Json event(const RunResult& r, const std::string& kind) {
  return ::qbc::testing::last_event_result(r, kind);
}

std::vector<std::string> stage_names(const Json& stages, const char* key) {
  std::vector<std::string> v;
  for (const Json& s : stages) v.push_back(s.value(key, ""));
  return v;
}

/// The names in `dir`, sorted.
std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

TEST(CompilePipelineCli, CompileRunsEveryStageAndWritesTheMbltOnlyWhenKept) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const fs::path dir = temp_dir() / "compile_pipeline";
  fs::remove_all(dir);
  fs::create_directories(dir / "plain");
  const RunResult plain =
      run_qbc("compile " + shell_quote(hf) + kFlags + " -o " + shell_quote(dir / "plain/s.mxq"));
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const Json s = event(plain, "summary");
  ASSERT_TRUE(s.is_object()) << plain.err;
  EXPECT_EQ(stage_names(s["stages"], "name"),
            (std::vector<std::string>{"parse", "fit", "quantize", "backend", "write"}));
  for (const Json& st : s["stages"]) EXPECT_GE(st["seconds"].get<double>(), 0.0) << st.dump();
  // No MBLT, no sidecar, no temporary folder: only the MXQ.
  EXPECT_FALSE(s.contains("mblt")) << s.dump();
  EXPECT_EQ(listing(dir / "plain"), std::vector<std::string>{"s.mxq"});

  const RunResult kept =
      run_qbc("compile " + shell_quote(hf) + kFlags + " -o " + shell_quote(dir / "s.mxq") +
              " --keep-intermediate " + shell_quote(dir / "keep"));
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  const Json k = event(kept, "summary");
  EXPECT_EQ(k.value("mblt", ""), (dir / "keep/s.mblt").string());
  EXPECT_EQ(listing(dir / "keep"), (std::vector<std::string>{"s.mblt", "s.weights.safetensors"}));
  // The backend compiles the same graph whether or not the MBLT is written.
  EXPECT_EQ(read_file(dir / "s.mxq"), read_file(dir / "plain/s.mxq"));
}

TEST(CompilePipelineCli, QuantizeRunsParseQuantizeWrite) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const fs::path dir = temp_dir() / "compile_pipeline_q";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const RunResult r =
      run_qbc("quantize " + shell_quote(hf) + kFlags + " -o " + shell_quote(dir / "q.mblt"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json s = event(r, "summary");
  EXPECT_EQ(stage_names(s["stages"], "name"),
            (std::vector<std::string>{"parse", "quantize", "write"}));
  EXPECT_EQ(listing(dir), (std::vector<std::string>{"q.mblt", "q.weights.safetensors"}));
  EXPECT_GT(s["mblt_bytes"].get<int64_t>(), 0);
  // A quantize output must be an .mblt, refused before the model is opened.
  const RunResult bad = run_qbc("quantize " + shell_quote(dir / "missing") + kFlags + " -o " +
                                shell_quote(dir / "q.txt"));
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("must end in .mblt"), std::string::npos) << bad.err;
}

TEST(CompilePipelineCli, PrintPipelineListsTheStageRows) {
  const RunResult c = run_qbc("compile --print-pipeline --preset llm --log-format json");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const Json j = event(c, "result");
  ASSERT_TRUE(j.contains("stages")) << c.err;
  EXPECT_EQ(stage_names(j["stages"], "pass"),
            (std::vector<std::string>{"parse", "fit", "quantize", "backend", "write"}));
  for (const Json& row : j["stages"]) EXPECT_FALSE(row.value("why", "").empty()) << row.dump();
  const RunResult q = run_qbc("quantize --print-pipeline --preset llm --log-format json");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_EQ(stage_names(event(q, "result")["stages"], "pass"),
            (std::vector<std::string>{"parse", "quantize", "write"}));
}

}  // namespace
}  // namespace qbc
