// The compact grouped weight image from the command line (docs/numerics.md "Compact grouped
// weights"): a W4 compile with groups of 32 and zero points writes fp16 scales, packed 4-bit
// zero points for the 4-bit linears and int8 ones for the 8-bit V and head (feature bits 1
// and 2 in the MXQ header), the executor running the MXQ gives the
// fake-quant evaluator's greedy tokens and perplexity on its quantized MBLT bit for bit, and `qbc
// plan` counts the smaller image.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::run_qbc;
using ::qbc::testing::shell_quote;
using ::qbc::testing::temp_dir;

// The W4 bits of configs/examples/w4v8.yaml on llm_fast.
const char* const kW4Sets =
    " --set bit.weightGroupSize=32 --set bit.weightZeroPoint=true"
    " --set bit.transformer.weight.query=4 --set bit.transformer.weight.key=4"
    " --set bit.transformer.weight.value=8 --set bit.transformer.weight.output=4"
    " --set bit.transformer.weight.ffn=4 --set bit.transformer.weight.head=8";

/// stories260K compiled once W4 (random calibration) to dir/w4.mxq, keeping dir/w4.mblt.
const fs::path& dir() {
  static const fs::path d = [] {
    const fs::path p = temp_dir() / "compact_w4_cli";
    fs::create_directories(p);
    const auto r =
        run_qbc("compile " + shell_quote(testing::shared_dir() / "models/stories260k/hf") +
                " --preset llm_fast --use-random-calib --set llm.attributes.maxCacheLength=256 "
                "--set llm.attributes.maxSequenceLength=256" +
                std::string(kW4Sets) + " -o " + shell_quote(p / "w4.mxq") +
                " --keep-intermediate " + shell_quote(p));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return p;
  }();
  return d;
}

// Header field: required feature bits at byte 24, little-endian (docs/mxq.md).
uint64_t required_features(const fs::path& mxq) {
  const std::string s = testing::read_file(mxq);
  uint64_t v = 0;
  if (s.size() >= 32) std::memcpy(&v, s.data() + 24, 8);
  return v;
}

TEST(CompactW4Cli, HeaderSetsFeatureBits1And2AndTheFileVerifies) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  ASSERT_TRUE(fs::exists(dir() / "w4.mxq"));
  EXPECT_EQ(required_features(dir() / "w4.mxq") & 6u, 6u);
  const auto v = run_qbc("verify " + shell_quote(dir() / "w4.mxq"));
  EXPECT_EQ(v.exit_code, 0) << v.err;
}

TEST(CompactW4Cli, ExecutorEqualsTheFakeQuantEvaluator) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  QBC_REQUIRE_SHARED(text, "data/tinystories/eval.clean.txt");
  ASSERT_TRUE(fs::exists(dir() / "w4.mblt"));
  const std::string run = " -p 'Once upon a time' -n 24 --ids";
  const auto npu = run_qbc("run " + shell_quote(dir() / "w4.mxq") + run + " --backend npu");
  const auto fq = run_qbc("run " + shell_quote(dir() / "w4.mblt") + run + " --backend fakequant");
  ASSERT_EQ(npu.exit_code, 0) << npu.err;
  ASSERT_EQ(fq.exit_code, 0) << fq.err;
  EXPECT_FALSE(npu.out.empty());
  EXPECT_EQ(npu.out, fq.out);
  const std::string ev = " --text " + shell_quote(text) + " --ctx 64 --chunks 3 --json";
  const auto a = run_qbc("eval " + shell_quote(dir() / "w4.mxq") + ev + " --backend npu");
  const auto b = run_qbc("eval " + shell_quote(dir() / "w4.mblt") + ev + " --backend fakequant");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["perplexity"], nlohmann::json::parse(b.out)["perplexity"]);
}

// qbc plan counts the compact bytes: the W4 group-32 weights of a SmolLM2-135M-shaped config
// take 4.625 bits a weight (4-bit codes, an fp16 scale and a 4-bit zero point per 32), where
// fp32 scales and int32 zero points took 6; the 8-bit grouped linears (V and the head) take
// 8 + 16/32 + 8/32 = 8.75 (an fp16 scale and an int8 zero point per 32) where they took
// 8 + 64/32 = 10. The plan's weight memory is that sum plus under 3 % (per-channel bias
// blocks, norms, tile padding); fp32/int32 8-bit groups would put it 5 % over.
TEST(CompactW4Cli, PlanCountsTheCompactWeightBytes) {
  QBC_REQUIRE_SHARED(cfg, "model-configs/SmolLM2-135M-Instruct/config.json");
  const auto r = run_qbc("plan " + shell_quote(cfg) + " --preset llm_fast --json" + kW4Sets);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const int64_t w4 = nlohmann::json::parse(r.out)["memory"]["dram"]["weights_bytes"].get<int64_t>();
  // SmolLM2-135M: 30 blocks of q, o 576x576, k, v 192x576, FFN 3 x 1536x576; head 49152x576.
  const double four = 30.0 * (576.0 * 576 * 2 + 192.0 * 576 + 3.0 * 1536 * 576);
  const double eight = 30.0 * 192 * 576 + 49152.0 * 576;
  const double predicted = four * 4.625 / 8 + eight * 8.75 / 8;
  EXPECT_GE(static_cast<double>(w4), predicted);
  EXPECT_LE(static_cast<double>(w4), 1.03 * predicted);
}

}  // namespace
}  // namespace qbc
