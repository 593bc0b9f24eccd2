// Codes kept, proven on the MXQ: a random model packed by the test packer in each format the CLI
// test compiles (compressed-tensors, GPTQ v1/v2, AWQ, auto-round, GPTQModel `dynamic`) compiles
// in-process, and the weight image of the MXQ file, read back through the layout docs/npu.md
// gives for fill-weights (per channel tile: its K tiles' dense code blocks, int4 two per byte
// low nibble first, then the scale and zero-point blocks per K tile, then the bias block), holds
// exactly the packed codes, scales and zero points.
#include <gtest/gtest.h>

#include "compile_fixture.h"
#include "mxq_weight_image.h"
#include "prequant_packer.h"
#include "qbc/frontend/random_model.h"
#include "qbc/mxq/model_file.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using testing::ImageLinear;
using testing::read_linear;
using testing::TestPacked;
using testing::TestPackFormat;
using testing::TestPackScheme;

// One format the CLI test compiles: the scheme, the quantization_config it is written under
// (null: the packer's own), a per-module override (GPTQModel `dynamic`) and the linears kept.
struct MxqCase {
  const char* name;
  TestPackScheme scheme;
  nlohmann::ordered_json qconfig = nullptr;
  testing::TestPackPerModule per_module = {};
  int kept = 14;
};

class PrequantMxq : public ::testing::TestWithParam<MxqCase> {};

TEST_P(PrequantMxq, TheMxqsWeightCodesAreThePackedCodes) {
  const MxqCase& c = GetParam();
  const frontend::RandomModelOptions o =
      testing::small_llama_options(testing::temp_dir() / c.name, 3, 128);
  QBC_ASSERT_OK(frontend::write_random_model(o));
  const std::map<std::string, TestPacked> truth = testing::test_pack_model(
      o.output_dir, c.scheme, testing::test_quantization_config(c.scheme), c.per_module);
  ASSERT_EQ(static_cast<int>(truth.size()), c.kept);
  if (!c.qconfig.is_null()) {
    // Written in its own key order (the order of `dynamic` rules matters).
    auto cfg = nlohmann::ordered_json::parse(testing::read_file(o.output_dir / "config.json"));
    cfg["quantization_config"] = c.qconfig;
    testing::write_file(o.output_dir / "config.json", cfg.dump(2));
  }
  const testing::CompiledMxq m0 = testing::compile_stories260k(c.name, {}, o.output_dir.string());
  ASSERT_TRUE(m0.error.empty()) << m0.error;
  auto m = mxq::load_model(m0.path.string());
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_NE(m->meta.weights_json().find("\"kept\":" + std::to_string(c.kept) + ","),
            std::string::npos)
      << m->meta.weights_json();
  const bool ct = testing::test_pack_is_ct(c.scheme.format);
  for (const auto& [module, t] : truth) {
    SCOPED_TRACE(module);
    TestPackScheme ms = c.scheme;
    if (c.per_module) c.per_module(module, ms);
    const int32_t shift = ct ? 0 : 1 << (ms.bits - 1);
    const ImageLinear got = read_linear(*m->bundle, testing::linear_node_of(module), t.out, t.in,
                                        ms.bits <= 4 ? 4 : 8, ms.group, !ms.symmetric);
    std::vector<int32_t> codes = t.codes, zeros = t.zeros;
    for (int32_t& q : codes) q -= shift;
    for (int32_t& z : zeros) z -= shift;
    EXPECT_EQ(got.codes, codes);
    EXPECT_EQ(got.scales, t.scales);
    if (!ms.symmetric) {
      EXPECT_EQ(got.zeros, zeros);
    }
  }
}

// GPTQModel `dynamic`: layer 1 int8 per channel symmetric, the rest the base int4 g32.
nlohmann::ordered_json dynamic_config() {
  nlohmann::ordered_json q = {{"quant_method", "gptq"}, {"bits", 4},
                              {"group_size", 32},       {"desc_act", false},
                              {"sym", false},           {"checkpoint_format", "gptq_v2"}};
  q["dynamic"] = nlohmann::ordered_json::object();
  q["dynamic"]["+:model\\.layers\\.1\\..*"] = {{"bits", 8}, {"group_size", -1}, {"sym", true}};
  return q;
}

void dynamic_scheme(const std::string& module, TestPackScheme& s) {
  if (module.rfind("model.layers.1.", 0) == 0) {
    s.bits = 8;
    s.group = 0;
    s.symmetric = true;
  }
}

nlohmann::ordered_json auto_round_gptq_config() {
  return {{"quant_method", "auto-round"},
          {"packing_format", "auto_round:auto_gptq"},
          {"bits", 4},
          {"group_size", 32},
          {"sym", false},
          {"data_type", "int"}};
}

// The formats of tests/cli/prequant_cli_test.cpp whose codes are all kept (its act-order cases
// keep 2 of 14 and are checked there on the quantized MBLT).
INSTANTIATE_TEST_SUITE_P(
    Formats, PrequantMxq,
    ::testing::Values(
        MxqCase{"ct_w4_g32_sym", {TestPackFormat::kCtPackedDense, 4, 32, true, false}},
        MxqCase{"ct_w4_g32_asym", {TestPackFormat::kCtPackedDense, 4, 32, false, false}},
        MxqCase{"ct_w8_channel", {TestPackFormat::kCtInt, 8, 0, true, false}},
        MxqCase{"gptq_v1_w4_g32", {TestPackFormat::kGptqV1, 4, 32, false, false}},
        MxqCase{"gptq_v2_w4_g32_sym", {TestPackFormat::kGptqV2, 4, 32, true, false}},
        MxqCase{"gptq_v2_w8_channel", {TestPackFormat::kGptqV2, 8, 0, true, false}},
        MxqCase{"awq_gemm_w4_g32", {TestPackFormat::kAwqGemm, 4, 32, false, false}},
        MxqCase{"auto_round_gptq",
                {TestPackFormat::kGptqV1, 4, 32, false, false},
                auto_round_gptq_config()},
        MxqCase{"gptq_dynamic",
                {TestPackFormat::kGptqV2, 4, 32, false, false},
                dynamic_config(),
                dynamic_scheme}),
    [](const ::testing::TestParamInfo<MxqCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace qbc
