// Pre-quantized HF checkpoints from the command line: a random model packed by the test packer
// (tests/support/prequant_packer.h, from the published layouts) in every format compiles to
// MXQ; where qbc's weights can hold the codes, the quantized MBLT's integer weights are exactly
// the packed codes, scales and zero points, and compile / inspect say so per tensor kind.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "prequant_packer.h"
#include "qbc/frontend/random_model.h"
#include "qbc/frontend/safetensors.h"
#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::run_qbc;
using ::qbc::testing::shell_quote;
using ::qbc::testing::temp_dir;
using ::qbc::testing::TestPacked;
using ::qbc::testing::TestPackFormat;
using ::qbc::testing::TestPackScheme;

fs::path packed_model(const std::string& name, const TestPackScheme& s,
                      std::map<std::string, TestPacked>* truth) {
  const frontend::RandomModelOptions o =
      ::qbc::testing::small_llama_options(temp_dir() / name / "hf", 5, 96);
  EXPECT_TRUE(frontend::write_random_model(o).ok());
  *truth =
      ::qbc::testing::test_pack_model(o.output_dir, s, ::qbc::testing::test_quantization_config(s));
  return o.output_dir;
}

std::vector<int64_t> ints_of(const frontend::SafetensorsTensor& t) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < t.data.size; ++i) out.push_back(static_cast<int8_t>(t.data.data[i]));
  return out;
}

struct CliCase {
  const char* name;
  TestPackScheme scheme;
  bool kept;  ///< qbc's weights can hold these codes.
};

class PrequantCli : public ::testing::TestWithParam<CliCase> {};

TEST_P(PrequantCli, CompilesToMxqAndKeepsTheCodesItCanHold) {
  const CliCase& c = GetParam();
  std::map<std::string, TestPacked> truth;
  const fs::path hf = packed_model(c.name, c.scheme, &truth);
  const fs::path dir = hf.parent_path();
  const auto r = testing::run_small_compile(hf, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The summary event: codes kept per tensor kind.
  const nlohmann::json summary = testing::last_json_event(r.err, "summary");
  ASSERT_TRUE(summary.contains("result")) << r.err;
  const nlohmann::json& iw = summary["result"]["imported_weights"];
  EXPECT_EQ(iw["imported"].get<int>(), 14);
  EXPECT_EQ(iw["kept"].get<int>(), c.kept ? 14 : 0);
  ASSERT_EQ(iw["kinds"].size(), 7u);
  for (const auto& k : iw["kinds"]) EXPECT_EQ(k["imported"].get<int>(), 2) << k.dump();
  if (!c.kept) {
    EXPECT_TRUE(contains(iw.dump(), "act-order groups")) << iw.dump();
  }
  // The quantized MBLT's integer weights are the packed ones (qbc's signed convention: GPTQ and
  // AWQ codes and zero points move down by 2^(b-1)).
  auto side = frontend::SafetensorsFile::open(dir / "q.weights.safetensors");
  ASSERT_TRUE(side.ok()) << side.status().message();
  const bool ct = ::qbc::testing::test_pack_is_ct(c.scheme.format);
  const int32_t shift = ct ? 0 : 1 << (c.scheme.bits - 1);
  for (const auto& [module, t] : truth) {
    SCOPED_TRACE(module);
    const std::string node = testing::linear_node_of(module);
    const frontend::SafetensorsTensor* wq = side->find(node + ".wq");
    const frontend::SafetensorsTensor* ws = side->find(node + ".wscale");
    ASSERT_NE(wq, nullptr);
    ASSERT_NE(ws, nullptr);
    std::vector<float> scales;
    ASSERT_TRUE(frontend::read_f32(*ws, &scales).ok());
    const std::vector<int64_t> codes = ints_of(*wq);
    std::vector<int64_t> expect(t.codes.begin(), t.codes.end());
    for (int64_t& q : expect) q -= shift;
    if (!c.kept) {
      EXPECT_NE(codes, expect);  // re-quantized by the recipe (W8 RTN)
      continue;
    }
    EXPECT_EQ(codes, expect);
    EXPECT_EQ(scales, t.scales);
    const frontend::SafetensorsTensor* wz = side->find(node + ".wzero");
    if (c.scheme.symmetric) {
      EXPECT_EQ(wz, nullptr);
    } else {
      ASSERT_NE(wz, nullptr);
      std::vector<int64_t> zexpect(t.zeros.begin(), t.zeros.end());
      for (int64_t& z : zexpect) z -= shift;
      EXPECT_EQ(ints_of(*wz), zexpect);
    }
  }
  // inspect shows the weights' provenance, in the MBLT and in the MXQ.
  const auto mblt = run_qbc("inspect " + shell_quote(dir / "q.mblt"));
  ASSERT_EQ(mblt.exit_code, 0) << mblt.err;
  EXPECT_TRUE(contains(mblt.out, "pre-quantized")) << mblt.out;
  EXPECT_TRUE(
      contains(mblt.out, "self_attn.q_proj: kept " + std::to_string(c.kept ? 2 : 0) + " of 2"))
      << mblt.out;
  const auto mxq = run_qbc("inspect --json " + shell_quote(dir / "q.mxq"));
  ASSERT_EQ(mxq.exit_code, 0) << mxq.err;
  const nlohmann::json j = nlohmann::json::parse(mxq.out);
  EXPECT_EQ(j["provenance"]["weights"]["kept"].get<int>(), c.kept ? 14 : 0) << mxq.out;
}

INSTANTIATE_TEST_SUITE_P(
    Formats, PrequantCli,
    ::testing::Values(
        CliCase{"ct_w4_g32_sym", {TestPackFormat::kCtPackedDense, 4, 32, true, false}, true},
        CliCase{"ct_w4_g32_asym", {TestPackFormat::kCtPackedDense, 4, 32, false, false}, true},
        CliCase{"ct_w8_channel", {TestPackFormat::kCtInt, 8, 0, true, false}, true},
        CliCase{"ct_w4_actorder", {TestPackFormat::kCtPackedDense, 4, 32, true, true}, false},
        CliCase{"gptq_v1_w4_g32", {TestPackFormat::kGptqV1, 4, 32, false, false}, true},
        CliCase{"gptq_v2_w4_g32_sym", {TestPackFormat::kGptqV2, 4, 32, true, false}, true},
        CliCase{"gptq_v1_descact", {TestPackFormat::kGptqV1, 4, 32, false, true}, false},
        CliCase{"gptq_v2_w8_channel", {TestPackFormat::kGptqV2, 8, 0, true, false}, true},
        CliCase{"awq_gemm_w4_g32", {TestPackFormat::kAwqGemm, 4, 32, false, false}, true}),
    [](const ::testing::TestParamInfo<CliCase>& info) { return std::string(info.param.name); });

TEST(PrequantCliErrors, UnsupportedFormatExits3SayingUseTheFloatCheckpoint) {
  std::map<std::string, TestPacked> truth;
  const fs::path hf =
      packed_model("fp8", {TestPackFormat::kCtPackedDense, 4, 32, true, false}, &truth);
  nlohmann::json cfg = nlohmann::json::parse(::qbc::testing::read_file(hf / "config.json"));
  cfg["quantization_config"]["config_groups"]["group_0"]["weights"]["type"] = "float";
  cfg["quantization_config"]["format"] = "float-quantized";
  ::qbc::testing::write_file(hf / "config.json", cfg.dump());
  const auto r =
      run_qbc("parse " + shell_quote(hf) + " -o " + shell_quote(hf.parent_path() / "x.mblt"));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(contains(r.err, "float-quantized")) << r.err;
  EXPECT_TRUE(contains(r.err, "quantization_config.format")) << r.err;
  EXPECT_TRUE(contains(r.err, "use the float checkpoint")) << r.err;
}

}  // namespace
}  // namespace qbc
