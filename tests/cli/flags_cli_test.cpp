// Flags a new user reaches for (issue 28, point 7): compile's --context / --batch, inspect
// --memory on a float model pointing to `qbc plan`, a compiled file's target that run and
// verify refuse to change, a missing --calib reported before the model is parsed, and a
// config.json whose model_type contradicts its architectures refused with exit 3.
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
using ::qbc::testing::write_file;

fs::path hf() { return testing::shared_dir() / "models/stories260k/hf"; }

/// One small compile of stories260K with --context 256 --batch 2, shared by the tests.
class FlagsCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(hf())) return;
    dir_ = new fs::path(temp_dir());
    result_ = new testing::RunResult(
        run_qbc("compile " + shell_quote(hf()) +
                " --preset llm_fast --use-random-calib --set calibration.numSamples=2"
                " --set calibration.seqLength=16 --context 256 --batch 2 -o " +
                shell_quote(*dir_ / "q.mxq") + " --keep-intermediate " + shell_quote(*dir_)));
  }
  static fs::path mxq() { return *dir_ / "q.mxq"; }
  static fs::path* dir_;
  static testing::RunResult* result_;
};
fs::path* FlagsCli::dir_ = nullptr;
testing::RunResult* FlagsCli::result_ = nullptr;

TEST_F(FlagsCli, CompileTakesContextAndBatch) {
  QBC_REQUIRE_SHARED(model, "models/stories260k/hf");
  ASSERT_EQ(result_->exit_code, 0) << result_->err;
  const auto i = run_qbc("inspect " + shell_quote(mxq()) + " --json");
  ASSERT_EQ(i.exit_code, 0) << i.err;
  const auto j = nlohmann::json::parse(i.out);
  EXPECT_EQ(j["max_cache"], 256);
  EXPECT_EQ(j["batch"], 2);
  const auto c = run_qbc("dump-config " + shell_quote(mxq()) + " --format json");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const auto cfg = nlohmann::json::parse(c.out)["llm"]["attributes"];
  EXPECT_EQ(cfg["maxSequenceLength"], 256);
  EXPECT_EQ(cfg["maxCacheLength"], 256);
  EXPECT_EQ(cfg["runtime"]["batchSize"], 2);
  // Their origins are the flags.
  const auto o =
      run_qbc("dump-config " + shell_quote(model) + " --context 256 --batch 2 --origins");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_TRUE(contains(o.out, "llm.attributes.maxCacheLength = 256")) << o.out;
  EXPECT_TRUE(contains(o.out, "llm.attributes.maxSequenceLength = 256")) << o.out;
  EXPECT_TRUE(contains(o.out, "# --context\n")) << o.out;
  EXPECT_TRUE(contains(o.out, "llm.attributes.runtime.batchSize = 2")) << o.out;
  EXPECT_TRUE(contains(o.out, "# --batch\n")) << o.out;
  EXPECT_EQ(run_qbc("compile " + shell_quote(model) + " --context 0 -o x.mxq").exit_code, 2);
}

TEST_F(FlagsCli, InspectMemoryOfAFloatModelPointsToPlan) {
  QBC_REQUIRE_SHARED(model, "models/stories260k/hf");
  const auto folder = run_qbc("inspect " + shell_quote(model) + " --memory");
  EXPECT_EQ(folder.exit_code, 2) << folder.err;
  EXPECT_TRUE(contains(folder.err, "qbc plan " + model.string())) << folder.err;
  EXPECT_FALSE(contains(folder.err, "a float linear")) << folder.err;
  const fs::path parsed = temp_dir() / "s.mblt";
  ASSERT_EQ(run_qbc("parse " + shell_quote(model) + " -o " + shell_quote(parsed)).exit_code, 0);
  const auto mblt = run_qbc("inspect " + shell_quote(parsed) + " --memory");
  EXPECT_EQ(mblt.exit_code, 2) << mblt.err;
  EXPECT_TRUE(contains(mblt.err, "float graph")) << mblt.err;
  EXPECT_TRUE(contains(mblt.err, "qbc plan")) << mblt.err;
  // The quantized graph has a memory plan.
  ASSERT_EQ(result_->exit_code, 0) << result_->err;
  const auto q = run_qbc("inspect " + shell_quote(*dir_ / "q.mblt") + " --memory --json");
  EXPECT_EQ(q.exit_code, 0) << q.err;
  EXPECT_TRUE(nlohmann::json::parse(q.out).contains("dram"));
}

TEST_F(FlagsCli, RunAndVerifyRefuseAnotherTarget) {
  QBC_REQUIRE_SHARED(model, "models/stories260k/hf");
  ASSERT_EQ(result_->exit_code, 0) << result_->err;
  const std::string file = shell_quote(mxq());
  const auto run = run_qbc("run " + file + " -p Once -n 2 --target-device regulus-rb");
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_TRUE(contains(run.err, "compiled for target 'aries-rb'")) << run.err;
  EXPECT_TRUE(contains(run.err, "--target-device regulus-rb")) << run.err;
  EXPECT_TRUE(run.out.empty()) << run.out;  // refused before generating
  // The file's own target is accepted.
  EXPECT_EQ(run_qbc("run " + file + " -p Once -n 2 --target-device aries-rb").exit_code, 0);
  const auto eval = run_qbc("eval " + file + " --text " +
                            shell_quote(testing::shared_dir() / "data/tinystories/eval.clean.txt") +
                            " --target-profile regulus-rb");
  EXPECT_EQ(eval.exit_code, 2) << eval.err;
  EXPECT_TRUE(contains(eval.err, "regulus-rb")) << eval.err;
  const auto scheme = run_qbc("run " + file + " -p Once -n 2 --inference-scheme multi");
  EXPECT_EQ(scheme.exit_code, 2) << scheme.err;
  EXPECT_TRUE(contains(scheme.err, "--core-mode")) << scheme.err;
  // verify accepts the flag and checks it.
  const auto bad = run_qbc("verify " + file + " --target-device regulus-rb");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(contains(bad.err, "aries-rb") && contains(bad.err, "regulus-rb")) << bad.err;
  EXPECT_FALSE(contains(bad.err, "were not expected")) << bad.err;
  const auto good = run_qbc("verify " + file + " --target-device aries-rb --json");
  EXPECT_EQ(good.exit_code, 0) << good.err;
  EXPECT_EQ(nlohmann::json::parse(good.out)["target"], "aries-rb");
}

TEST(FlagsCliInputs, MissingCalibrationIsReportedBeforeTheModelIsParsed) {
  QBC_REQUIRE_SHARED(model, "models/stories260k/hf");
  // A valid config.json over a weight file that is not safetensors: parsing it would fail,
  // so only a check made before parsing can name the missing calibration data.
  const fs::path dir = temp_dir();
  write_file(dir / "m/config.json", read_file(model / "config.json"));
  write_file(dir / "m/model.safetensors", std::string(4096, 'x'));
  const auto r = run_qbc("compile " + shell_quote(dir / "m") + " --preset llm -o " +
                         shell_quote(dir / "q.mxq"));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "no calibration data")) << r.err;
  EXPECT_FALSE(contains(r.err, "safetensors")) << r.err;
  const auto missing = run_qbc("compile " + shell_quote(dir / "m") + " --calib " +
                               shell_quote(dir / "nope") + " -o " + shell_quote(dir / "q.mxq"));
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_TRUE(contains(missing.err, "nope: no such file or folder (calibDataPaths, from --calib)"))
      << missing.err;
  EXPECT_FALSE(fs::exists(dir / "q.mxq"));
}

TEST(FlagsCliInputs, ModelTypeThatContradictsTheArchitectureExitsThree) {
  QBC_REQUIRE_SHARED(model, "models/stories260k/hf");
  auto cfg = nlohmann::json::parse(read_file(model / "config.json"));
  cfg["model_type"] = "llava";  // architectures stays LlamaForCausalLM
  const fs::path dir = temp_dir();
  write_file(dir / "m/config.json", cfg.dump(2));
  fs::copy_file(model / "model.safetensors", dir / "m/model.safetensors");
  const auto r = run_qbc("parse " + shell_quote(dir / "m") + " -o " + shell_quote(dir / "m.mblt"));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  for (const char* want : {"model_type", "'llava'", "'LlamaForCausalLM'", "'llama'", "planned"})
    EXPECT_TRUE(contains(r.err, want)) << want << "\n" << r.err;
  EXPECT_FALSE(fs::exists(dir / "m.mblt"));
  const auto plan = run_qbc("plan --model-config " + shell_quote(dir / "m/config.json"));
  EXPECT_EQ(plan.exit_code, 3) << plan.err;
  // A non-multimodal mismatch is refused too, without the multimodal note.
  cfg["model_type"] = "qwen2";
  write_file(dir / "m/config.json", cfg.dump(2));
  const auto q = run_qbc("plan --model-config " + shell_quote(dir / "m/config.json"));
  EXPECT_EQ(q.exit_code, 3) << q.err;
  EXPECT_TRUE(contains(q.err, "'qwen2'")) << q.err;
  EXPECT_FALSE(contains(q.err, "planned")) << q.err;
  // A VLM architecture qbc does not read (PaliGemma) says multimodal is planned.
  cfg["architectures"] = nlohmann::json::array({"PaliGemmaForConditionalGeneration"});
  cfg["model_type"] = "paligemma";
  write_file(dir / "m/config.json", cfg.dump(2));
  const auto l = run_qbc("plan --model-config " + shell_quote(dir / "m/config.json"));
  EXPECT_EQ(l.exit_code, 3) << l.err;
  EXPECT_TRUE(contains(l.err, "PaliGemmaForConditionalGeneration")) << l.err;
  EXPECT_TRUE(contains(l.err, "planned")) << l.err;
}

}  // namespace
}  // namespace qbc
