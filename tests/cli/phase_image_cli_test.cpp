// Precision per phase from the command line (docs/quantization.md "Precision per phase"):
// `qbc compile --set bit.decode.weight=4` says how many linears got their own decode image,
// stores the keys (dump-config), verifies and runs; `qbc plan` prints the second image's
// bytes; `qbc eval --as-reply` scores the generated tokens on the decode image (other numbers
// than one call per chunk on such a model, the same on a model of one image); both phases set,
// or --as-reply with --ctx-sweep, are refused with exit 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::run_qbc;
using ::qbc::testing::shell_quote;

const char* const kDecode4 = " --set bit.decode.weight=4 --set bit.decode.weightGroupSize=32";

/// stories260K compiled with llm_fast (W8) on random calibration, plus `extra`, into DIR/q.mxq.
fs::path compile(const fs::path& hf, const std::string& extra, testing::RunResult* r) {
  const fs::path out = testing::temp_dir() / "q.mxq";
  *r = run_qbc("compile " + shell_quote(hf) + " --preset llm_fast --use-random-calib" + extra +
               " -o " + shell_quote(out));
  return out;
}

/// `qbc eval MXQ --text TEXT --ctx 64 --chunks 2 --json EXTRA`: its perplexity.
double eval_ppl(const fs::path& mxq, const fs::path& text, const std::string& extra) {
  const auto r = run_qbc("eval " + shell_quote(mxq) + " --text " + shell_quote(text) +
                         " --ctx 64 --chunks 2 --json" + extra);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out;
  return j.is_discarded() ? 0.0 : j["perplexity"].get<double>();
}

TEST(PhaseImageCli, CompileRunVerifyAndScoreAsAReply) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  QBC_REQUIRE_SHARED(text, "data/tinystories/eval.clean.txt");
  testing::RunResult c;
  const fs::path mxq = compile(hf, kDecode4, &c);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  // stories260K: 5 blocks of 7 linears, the head excepted.
  EXPECT_TRUE(contains(c.err, "35 with their own 4-bit decode image (bit.decode.weight)")) << c.err;
  const auto dump = run_qbc("dump-config " + shell_quote(mxq));
  ASSERT_EQ(dump.exit_code, 0) << dump.err;
  EXPECT_TRUE(contains(dump.out, "decode:")) << dump.out;
  const auto v = run_qbc("verify " + shell_quote(mxq));
  EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
  const auto run = run_qbc("run " + shell_quote(mxq) + " -p 'Once upon a time' -n 8");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(contains(run.out, "Once upon a time")) << run.out;
  // The generated tokens read the 4-bit image: scored as a reply, other numbers.
  const double whole = eval_ppl(mxq, text, ""), reply = eval_ppl(mxq, text, " --as-reply");
  EXPECT_GT(whole, 1.0);
  EXPECT_GT(reply, 1.0);
  EXPECT_NE(whole, reply);
  // A model of one image scores the same either way (its calls are bit-exact however split).
  testing::RunResult c1;
  const fs::path one = compile(hf, "", &c1);
  ASSERT_EQ(c1.exit_code, 0) << c1.err;
  EXPECT_FALSE(contains(c1.err, "image (bit.")) << c1.err;
  EXPECT_EQ(eval_ppl(one, text, ""), eval_ppl(one, text, " --as-reply"));
}

TEST(PhaseImageCli, PlanPrintsTheSecondImage) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const auto p = run_qbc("plan " + shell_quote(hf) + " --preset llm_fast" + kDecode4);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_TRUE(
      contains(p.out, "are the decode programs' own image of 35 linears (bit.decode.weight)"))
      << p.out;
  const auto j = run_qbc("plan " + shell_quote(hf) + " --preset llm_fast --json" + kDecode4);
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const nlohmann::json plan = nlohmann::json::parse(j.out);
  EXPECT_EQ(plan["memory"]["second_weight_image"]["phase"], "decode");
  EXPECT_EQ(plan["memory"]["second_weight_image"]["linears"], 35);
  EXPECT_GT(plan["memory"]["second_weight_image"]["bytes"].get<int64_t>(), 0);
  // The plan (shapes only) counts the grouped 4-bit image as compile writes it (compact: fp16
  // scales, packed zero points): the same DRAM weights as the compiled file's own plan.
  testing::RunResult c;
  const fs::path mxq = compile(hf, kDecode4, &c);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const auto mem = run_qbc("inspect " + shell_quote(mxq) + " --memory --json");
  ASSERT_EQ(mem.exit_code, 0) << mem.err;
  EXPECT_EQ(nlohmann::json::parse(mem.out)["dram"]["weights_bytes"],
            plan["memory"]["dram"]["weights_bytes"]);
  const auto plain = run_qbc("plan " + shell_quote(hf) + " --preset llm_fast --json");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_FALSE(nlohmann::json::parse(plain.out)["memory"].contains("second_weight_image"));
}

TEST(PhaseImageCli, RefusedCombinations) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  QBC_REQUIRE_SHARED(text, "data/tinystories/eval.clean.txt");
  testing::RunResult both;
  const fs::path out = compile(hf, " --set bit.decode.weight=4 --set bit.prefill.weight=8", &both);
  EXPECT_EQ(both.exit_code, 2) << both.err;
  EXPECT_TRUE(contains(both.err, "one phase at most")) << both.err;
  EXPECT_FALSE(fs::exists(out));
  const auto sweep = run_qbc("eval " + shell_quote(hf) + " --text " + shell_quote(text) +
                             " --reference " + shell_quote(hf) + " --ctx-sweep 64 --as-reply");
  EXPECT_EQ(sweep.exit_code, 2) << sweep.err;
  EXPECT_TRUE(contains(sweep.err, "--as-reply")) << sweep.err;
}

}  // namespace
}  // namespace qbc
