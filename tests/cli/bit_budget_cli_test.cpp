// Bits by budget from the command line (src/driver/bit_budget.cpp): `qbc compile
// --target-size` picks which block linears of stories260K keep 8 bits so that the DRAM
// weights land within 3 % under the target, the MXQ holds exactly the predicted weights, its
// stored configuration recompiles to the same bytes, and the executor equals the fake-quant
// evaluator on it bit for bit; --target-decode-tok-s meets its predicted rate; a target out of
// reach exits 2 naming the smallest size and leaves no file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "json_events.h"
#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::read_file;
using ::qbc::testing::run_qbc;
using ::qbc::testing::RunResult;
using ::qbc::testing::shell_quote;
using ::qbc::testing::temp_dir;
using Json = nlohmann::json;

// Groups of 32 with zero points (the 4-bit layout of configs/examples/w4v8.yaml), short cache.
const char* const kBase =
    " --preset llm_fast --set llm.attributes.maxCacheLength=256"
    " --set llm.attributes.maxSequenceLength=256 --set bit.weightGroupSize=32"
    " --set bit.weightZeroPoint=true";
const char* const kAllFour =
    " --set bit.transformer.weight.query=4 --set bit.transformer.weight.key=4"
    " --set bit.transformer.weight.value=4 --set bit.transformer.weight.output=4"
    " --set bit.transformer.weight.ffn=4";

Json event(const RunResult& r, const std::string& kind) {
  return ::qbc::testing::last_event_result(r, kind);
}

/// `qbc plan` of stories260K with `extra`, as JSON.
Json plan(const fs::path& hf, const std::string& extra) {
  const RunResult r = run_qbc("plan " + shell_quote(hf) + kBase + extra + " --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return Json::parse(r.out, nullptr, false);
}

int64_t weights_bytes(const Json& plan) {
  return plan["memory"]["dram"]["weights_bytes"].get<int64_t>();
}

/// The scheme with the fastest decode in `plan`.
std::string fastest_scheme(const Json& plan) {
  double best = 0;
  std::string name;
  for (const Json& s : plan["schemes"]) {
    if (s["decode_tok_s"].get<double>() > best) {
      best = s["decode_tok_s"].get<double>();
      name = s["scheme"].get<std::string>();
    }
  }
  return name;
}

double decode_of(const Json& plan, const std::string& scheme) {
  for (const Json& s : plan["schemes"])
    if (s["scheme"] == scheme) return s["decode_tok_s"].get<double>();
  return 0;
}

fs::path fresh_dir(const char* name) {
  const fs::path d = temp_dir() / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(BitBudgetCli, TargetSizeLandsWithinThreePercentAndTheMxqRecompilesAndRunsExactly) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const fs::path dir = fresh_dir("bit_budget_size");
  const int64_t all4 = weights_bytes(plan(hf, kAllFour));
  const int64_t all8 = weights_bytes(plan(hf, ""));
  ASSERT_LT(all4, all8);
  const int64_t target = (all4 + all8) / 2;
  const RunResult c =
      run_qbc("--log-format json compile " + shell_quote(hf) + kBase +
              " --use-random-calib --target-size " + std::to_string(target) + "B -o " +
              shell_quote(dir / "b.mxq") + " --keep-intermediate " + shell_quote(dir));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const Json s = event(c, "summary");
  ASSERT_TRUE(s.contains("bit_budget")) << c.err;
  const Json& b = s["bit_budget"];
  const int64_t predicted = b["predicted"]["weights_bytes"].get<int64_t>();
  EXPECT_LE(predicted, target);
  EXPECT_GE(static_cast<double>(predicted), 0.97 * static_cast<double>(target));
  EXPECT_EQ(b["compiled_weights_bytes"].get<int64_t>(), predicted);
  EXPECT_EQ(b["predicted"]["all4_weights_bytes"].get<int64_t>(), all4);
  EXPECT_EQ(b["predicted"]["all8_weights_bytes"].get<int64_t>(), all8);
  EXPECT_EQ(b["candidates"].get<int64_t>(), 35);  // 5 blocks x 7 linears
  const std::vector<std::string> eight = b["eight_bit"].get<std::vector<std::string>>();
  EXPECT_GT(eight.size(), 0u);
  EXPECT_LT(eight.size(), 35u);
  EXPECT_EQ(b["four_bit_count"].get<int64_t>(), 35 - static_cast<int64_t>(eight.size()));
  // The text summary says it too.
  EXPECT_TRUE(contains(c.err, "bits by budget (--target-size")) << c.err;
  // The chosen k is the largest that fits: the eight-bit list is the head of the sensitivity
  // order (errors per weight non-increasing), and one more linear of that order at 8 bits
  // would exceed the target.
  const Json& order = b["sensitivity"];
  ASSERT_EQ(order.size(), 35u);
  for (size_t i = 0; i < order.size(); ++i) {
    if (i < eight.size()) EXPECT_EQ(order[i]["linear"], eight[i]);
    if (i > 0)
      EXPECT_GE(order[i - 1]["error_per_weight"].get<double>(),
                order[i]["error_per_weight"].get<double>());
  }
  auto eight_list = [&](size_t k) {
    std::string list = " --set 'bit.layerOverrides.weight8Bits=[";
    for (size_t i = 0; i < k; ++i)
      list += (i ? "," : "") + std::string("\"") + order[i]["linear"].get<std::string>() + "\"";
    return list + "]'";
  };
  EXPECT_EQ(weights_bytes(plan(hf, kAllFour + eight_list(eight.size()))), predicted);
  EXPECT_GT(weights_bytes(plan(hf, kAllFour + eight_list(eight.size() + 1))), target);

  // The stored configuration holds the choice and recompiles to the same file.
  const RunResult d = run_qbc("dump-config " + shell_quote(dir / "b.mxq") + " --format json");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  const Json cfg = Json::parse(d.out);
  EXPECT_EQ(cfg["bit"]["transformer"]["weight"]["ffn"], 4);
  EXPECT_EQ(cfg["bit"]["transformer"]["weight"]["query"], 4);
  EXPECT_EQ(cfg["bit"]["layerOverrides"]["weight8Bits"].get<std::vector<std::string>>(), eight);
  const fs::path dumped = dir / "chosen.json";
  {
    std::ofstream f(dumped);
    f << d.out;
  }
  const RunResult again = run_qbc("compile " + shell_quote(hf) + " -c " + shell_quote(dumped) +
                                  " -o " + shell_quote(dir / "again.mxq"));
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(read_file(dir / "again.mxq") == read_file(dir / "b.mxq"));

  // The executor equals the fake-quant evaluator on the mixed 4/8-bit model.
  const std::string args = " -p 'Once upon a time' -n 24 --ids";
  const RunResult npu = run_qbc("run " + shell_quote(dir / "b.mxq") + args + " --backend npu");
  const RunResult fq =
      run_qbc("run " + shell_quote(dir / "b.mblt") + args + " --backend fakequant");
  ASSERT_EQ(npu.exit_code, 0) << npu.err;
  ASSERT_EQ(fq.exit_code, 0) << fq.err;
  EXPECT_FALSE(npu.out.empty());
  EXPECT_EQ(npu.out, fq.out);
}

// Under --preset llm the linears the budget sends to 4 bits get the preset's 4-bit weight
// quantizer (groups of 32 with zero points, GPTQ aimed at the float outputs: its
// fourBitWeights section), as a user's own 4-bit bits would; the plans see that layout (the
// compiled weights equal the prediction), and a key the user set keeps the user's value. A
// target met with every linear at 8 bits compiles the preset as it is (no 4-bit keys).
TEST(BitBudgetCli, PresetLlmGivesTheBudgetsFourBitLinearsItsFourBitQuantizer) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const fs::path dir = fresh_dir("bit_budget_llm");
  const std::string common =
      " --preset llm --use-random-calib --set calibration.numSamples=2"
      " --set llm.attributes.maxCacheLength=256 --set llm.attributes.maxSequenceLength=256";
  struct Case {
    const char* name;
    const char* extra;
    int group;
    bool zero_point, gptq, mixed;
  };
  for (const Case& k :
       {Case{"preset", " --target-size 259264B", 32, true, true, true},
        Case{"user",
             " --target-size 259264B --set bit.weightGroupSize=0 --set hessianQuant.apply=false", 0,
             true, false, true},
        Case{"all8", " --target-size 1GiB", 0, false, false, false}}) {
    SCOPED_TRACE(k.name);
    const fs::path out = dir / (std::string(k.name) + ".mxq");
    const RunResult c = run_qbc("--log-format json compile " + shell_quote(hf) + common + k.extra +
                                " -o " + shell_quote(out));
    ASSERT_EQ(c.exit_code, 0) << c.err;
    const Json b = event(c, "summary")["bit_budget"];
    ASSERT_TRUE(b.is_object()) << c.err;
    EXPECT_EQ(b["compiled_weights_bytes"], b["predicted"]["weights_bytes"]);
    EXPECT_EQ(b["four_bit_count"].get<int64_t>() > 0, k.mixed) << b.dump();
    const RunResult d = run_qbc("dump-config " + shell_quote(out) + " --format json");
    ASSERT_EQ(d.exit_code, 0) << d.err;
    const Json cfg = Json::parse(d.out);
    EXPECT_EQ(cfg["bit"]["weightGroupSize"], k.group);
    EXPECT_EQ(cfg["bit"]["weightZeroPoint"], k.zero_point);
    EXPECT_EQ(cfg["hessianQuant"]["apply"], k.gptq);
    EXPECT_EQ(cfg["hessianQuant"]["attributes"]["floatTarget"], k.mixed);
    EXPECT_EQ(cfg["bit"]["transformer"]["weight"]["ffn"], k.mixed ? 4 : 8);
  }
}

TEST(BitBudgetCli, TargetDecodeIsMetByItsPrediction) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const fs::path dir = fresh_dir("bit_budget_decode");
  // The budget times the scheme that decodes fastest with every linear at 8 bits.
  const Json eight = plan(hf, "");
  const std::string scheme = fastest_scheme(eight);
  const double slow = decode_of(eight, scheme);
  const double fast = decode_of(plan(hf, kAllFour), scheme);
  ASSERT_GT(slow, 0);
  ASSERT_GE(fast, slow);
  const double target = (slow + fast) / 2;
  char arg[64];
  std::snprintf(arg, sizeof(arg), "%.6f", target);
  const RunResult c = run_qbc("--log-format json compile " + shell_quote(hf) + kBase +
                              " --use-random-calib --target-decode-tok-s " + arg + " -o " +
                              shell_quote(dir / "d.mxq"));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const Json b = event(c, "summary")["bit_budget"];
  ASSERT_TRUE(b.is_object()) << c.err;
  EXPECT_EQ(b["target"]["kind"], "decode_tok_s");
  EXPECT_GE(b["predicted"]["decode_tok_s"].get<double>(), target);
  EXPECT_EQ(b["predicted"]["scheme"], scheme);
  EXPECT_LT(b["predicted"]["decode_tok_s"].get<double>(), fast + 1e-9);
  EXPECT_NEAR(b["predicted"]["all8_decode_tok_s"].get<double>(), slow, 1e-6 * slow);
}

// Linears the configuration fixes are not candidates and keep their bits; the user's own
// globs stay first in weight8Bits, and --print-pipeline lists the bits stage.
TEST(BitBudgetCli, LinearsTheConfigurationFixesKeepTheirBits) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const fs::path dir = fresh_dir("bit_budget_fixed");
  const fs::path cfg = dir / "fixed.yaml";
  {
    std::ofstream f(cfg);
    f << "bit:\n  layerOverrides:\n    weight8Bits: [\"blk.1.*\", \"blk.0.attn.q_proj\"]\n";
  }
  const int64_t all4 = weights_bytes(plan(hf, std::string(kAllFour) + " -c " + shell_quote(cfg)));
  const int64_t all8 = weights_bytes(plan(hf, " -c " + shell_quote(cfg)));
  ASSERT_LT(all4, all8);
  const RunResult c =
      run_qbc("--log-format json compile " + shell_quote(hf) + kBase + " -c " + shell_quote(cfg) +
              " --use-random-calib --target-size " + std::to_string((all4 + all8) / 2) + "B -o " +
              shell_quote(dir / "f.mxq"));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const Json b = event(c, "summary")["bit_budget"];
  ASSERT_TRUE(b.is_object()) << c.err;
  EXPECT_EQ(b["candidates"].get<int64_t>(), 35 - 7 - 1);  // block 1 and blk.0's q stay at 8
  for (const std::string& n : b["eight_bit"].get<std::vector<std::string>>()) {
    EXPECT_NE(n.rfind("blk.1.", 0), 0u) << n;
    EXPECT_NE(n, "blk.0.attn.q_proj");
  }
  const RunResult d = run_qbc("dump-config " + shell_quote(dir / "f.mxq") + " --format json");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  const Json stored = Json::parse(d.out);
  const Json& lo = stored["bit"]["layerOverrides"];
  ASSERT_GE(lo["weight8Bits"].size(), 1u);
  EXPECT_EQ(lo["weight8Bits"][0], "blk.1.*");
  EXPECT_EQ(lo["weight8Bits"][1], "blk.0.attn.q_proj");
  EXPECT_EQ(lo["weight8Bits"].size(), 2 + b["eight_bit"].size());

  const RunResult p = run_qbc("compile --print-pipeline --target-size 1GiB --log-format json");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_TRUE(contains(p.err, "\"bits\"")) << p.err;
  const RunResult bad = run_qbc("compile --print-pipeline --target-size 3parsecs");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
}

TEST(BitBudgetCli, ATargetOutOfReachExitsTwoNamingTheSmallestSizeAndWritesNothing) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const fs::path dir = fresh_dir("bit_budget_reach");
  const RunResult c =
      run_qbc("compile " + shell_quote(hf) + kBase + " --use-random-calib --target-size 1KiB -o " +
              shell_quote(dir / "x.mxq"));
  EXPECT_EQ(c.exit_code, 2) << c.err;
  EXPECT_TRUE(contains(c.err, "--target-size 1KiB: out of reach")) << c.err;
  EXPECT_TRUE(contains(c.err, "at 4 bits the DRAM weights are")) << c.err;
  // Refused from the plans alone, before the sensitivity is measured.
  EXPECT_FALSE(contains(c.err, "calibrating on random tokens")) << c.err;
  EXPECT_FALSE(fs::exists(dir / "x.mxq"));
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename().string());
  EXPECT_TRUE(left.empty()) << left.front();

  const RunResult both = run_qbc("compile " + shell_quote(hf) + kBase +
                                 " --use-random-calib --target-size 1GiB --target-decode-tok-s 5"
                                 " -o " +
                                 shell_quote(dir / "y.mxq"));
  EXPECT_EQ(both.exit_code, 2) << both.err;
  EXPECT_TRUE(contains(both.err, "give one budget")) << both.err;
  const RunResult unit =
      run_qbc("compile " + shell_quote(hf) + kBase +
              " --use-random-calib --target-size 3parsecs -o " + shell_quote(dir / "z.mxq"));
  EXPECT_EQ(unit.exit_code, 2) << unit.err;
  EXPECT_TRUE(contains(unit.err, "unknown unit 'parsecs'")) << unit.err;
}

}  // namespace
}  // namespace qbc
