// `qbc eval --ctx-sweep` (docs/cli.md): the accuracy report once per context length, one row
// per length in ascending order, each the same figures `qbc eval --ctx N --reference` gives
// for that length alone; bad lists and a missing --reference are refused (exit 2).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "test_support.h"

namespace qbc {
namespace {

using ::qbc::testing::contains;
using ::qbc::testing::run_qbc;
using ::qbc::testing::shell_quote;

// llama.cpp's Q8_0 file of stories260K against the float model: a small, nonzero divergence.
std::string eval_args(const std::filesystem::path& dir, const std::filesystem::path& text) {
  return "eval " + shell_quote(dir / "quant/stories260K-Q8_0.gguf") + " --reference " +
         shell_quote(dir / "hf") + " --text " + shell_quote(text) + " --chunks 2";
}

TEST(CtxSweepCli, OneRowPerLengthAscendingEachAsASingleEval) {
  QBC_REQUIRE_SHARED(dir, "models/stories260k");
  QBC_REQUIRE_SHARED(text, "data/tinystories/eval.clean.txt");
  const auto r = run_qbc(eval_args(dir, text) + " --ctx-sweep 256,64,128,128 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json& rows = j["sweep"];
  ASSERT_EQ(rows.size(), 3u);  // 128 twice is one row
  const int64_t want[] = {64, 128, 256};
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t ctx = rows[i]["ctx"].get<int64_t>();
    EXPECT_EQ(ctx, want[i]);
    EXPECT_EQ(rows[i]["chunks"], 2);
    // llama.cpp's protocol: the second half of each chunk is scored, its first token excepted.
    EXPECT_EQ(rows[i]["tokens_scored"].get<int64_t>(), 2 * (ctx / 2 - 1));
    EXPECT_GT(rows[i]["kld_mean"].get<double>(), 0.0);
    EXPECT_LT(rows[i]["kld_mean"].get<double>(), 0.01);
    EXPECT_GT(rows[i]["top1"].get<double>(), 0.9);
    EXPECT_LE(rows[i]["top1"].get<double>(), 1.0);
  }
  // The 128 row is what a plain eval at --ctx 128 reports.
  const auto one = run_qbc(eval_args(dir, text) + " --ctx 128 --json");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const nlohmann::json s = nlohmann::json::parse(one.out);
  EXPECT_EQ(rows[1]["kld_mean"], s["kld_mean"]);
  EXPECT_EQ(rows[1]["top1"], s["top1"]);
  EXPECT_EQ(rows[1]["perplexity"], s["perplexity"]);
  EXPECT_EQ(rows[1]["perplexity_reference"], s["perplexity_reference"]);
}

TEST(CtxSweepCli, TextTableHasAHeaderAndOneLinePerLength) {
  QBC_REQUIRE_SHARED(dir, "models/stories260k");
  QBC_REQUIRE_SHARED(text, "data/tinystories/eval.clean.txt");
  const auto r = run_qbc(eval_args(dir, text) + " --ctx-sweep 128,64");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream in(r.out);
  std::string header, a, b, extra;
  ASSERT_TRUE(std::getline(in, header));
  EXPECT_TRUE(contains(header, "KLD mean")) << header;
  EXPECT_TRUE(contains(header, "top-1")) << header;
  ASSERT_TRUE(std::getline(in, a));
  ASSERT_TRUE(std::getline(in, b));
  EXPECT_FALSE(std::getline(in, extra) && !extra.empty()) << extra;
  long long ca = 0, cb = 0;
  std::istringstream(a) >> ca;
  std::istringstream(b) >> cb;
  EXPECT_EQ(ca, 64);
  EXPECT_EQ(cb, 128);
}

TEST(CtxSweepCli, BadListsAndAMissingReferenceAreRefused) {
  QBC_REQUIRE_SHARED(dir, "models/stories260k");
  QBC_REQUIRE_SHARED(text, "data/tinystories/eval.clean.txt");
  for (const char* bad : {"128,abc", "128,,256", "1", "0,64", "64x"}) {
    const auto r = run_qbc(eval_args(dir, text) + " --ctx-sweep " + shell_quote(bad));
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "--ctx-sweep")) << bad << ": " << r.err;
  }
  const auto r = run_qbc("eval " + shell_quote(dir / "hf") + " --text " + shell_quote(text) +
                         " --ctx-sweep 64,128");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--reference")) << r.err;
}

}  // namespace
}  // namespace qbc
