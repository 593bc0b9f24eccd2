// Pre-quantized HF checkpoints: quantization_config parsing, and round trips float -> the test's
// packer (tests/support/prequant_packer.h, written from the published layouts) -> ModelSource,
// which must give back the packer's codes, scales and zero points and the formula's weights.
#include "qbc/frontend/prequant.h"

#include <gtest/gtest.h>

#include "prequant_packer.h"
#include "qbc/frontend/model_source.h"
#include "qbc/frontend/random_model.h"
#include "test_models.h"
#include "test_support.h"

namespace qbc::frontend {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::TestPacked;
using ::qbc::testing::TestPackFormat;
using ::qbc::testing::TestPackScheme;

fs::path write_packed_model(const std::string& name, const TestPackScheme& s,
                            std::map<std::string, TestPacked>* truth,
                            nlohmann::json qconfig = nullptr) {
  RandomModelOptions o;
  o.output_dir = ::qbc::testing::temp_dir() / name;
  o.seed = 11;
  o.overrides = ::qbc::testing::shrink();
  EXPECT_TRUE(write_random_model(o).ok());
  if (qconfig.is_null()) qconfig = ::qbc::testing::test_quantization_config(s);
  *truth = ::qbc::testing::test_pack_model(o.output_dir, s, qconfig);
  return o.output_dir;
}

struct RoundTripCase {
  const char* name;
  TestPackScheme scheme;
};

class PrequantRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(PrequantRoundTrip, ReaderGivesThePackersCodesAndTheFormulasWeights) {
  const RoundTripCase& c = GetParam();
  std::map<std::string, TestPacked> truth;
  const fs::path dir = write_packed_model(c.name, c.scheme, &truth);
  ASSERT_EQ(truth.size(), 14u);  // 2 layers x (q, k, v, o, gate, up, down).
  auto src = ModelSource::open(dir);
  ASSERT_TRUE(src.ok()) << src.status().message();
  QBC_ASSERT_OK(src->validate());
  EXPECT_TRUE(src->unexpected_tensors().empty());
  ASSERT_NE(src->prequant_config(), nullptr);
  EXPECT_EQ(src->packed_linears().size(), truth.size());
  for (const auto& [module, t] : truth) {
    SCOPED_TRACE(module);
    auto p = src->read_packed(module + ".weight");
    ASSERT_TRUE(p.ok()) << p.status().message();
    ASSERT_EQ(p->out, t.out);
    ASSERT_EQ(p->in, t.in);
    EXPECT_EQ(p->num_groups, t.groups);
    EXPECT_EQ(p->codes, t.codes);
    EXPECT_EQ(p->scales, t.scales);
    EXPECT_EQ(p->zeros, t.zeros);
    for (int64_t i = 0; i < t.in; ++i) ASSERT_EQ(p->group_of(i), t.g_idx[static_cast<size_t>(i)]);
    EXPECT_EQ(p->g_idx.empty(), !c.scheme.act_order);
    std::vector<float> w;
    QBC_ASSERT_OK(src->read_f32(module + ".weight", &w));
    ASSERT_EQ(static_cast<int64_t>(w.size()), t.out * t.in);
    for (int64_t o = 0; o < t.out; ++o) {
      for (int64_t i = 0; i < t.in; ++i) {
        ASSERT_EQ(w[static_cast<size_t>(o * t.in + i)], t.dequant(o, i)) << o << "," << i;
      }
    }
    EXPECT_EQ(src->find(module + ".weight")->shape, (std::vector<int64_t>{t.out, t.in}));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, PrequantRoundTrip,
    ::testing::Values(
        RoundTripCase{"ct_int4_g32_sym", {TestPackFormat::kCtPackedDense, 4, 32, true, false}},
        RoundTripCase{"ct_int4_g32_asym_actorder",
                      {TestPackFormat::kCtPackedDense, 4, 32, false, true}},
        RoundTripCase{"ct_int3_channel_asym_dense",
                      {TestPackFormat::kCtPackedDense, 3, 0, false, false}},
        RoundTripCase{"ct_int3_channel_asym_padded",
                      {TestPackFormat::kCtPackedPadded, 3, 0, false, false}},
        RoundTripCase{"ct_int6_g32_sym_padded",
                      {TestPackFormat::kCtPackedPadded, 6, 32, true, false}},
        RoundTripCase{"ct_int5_g32_asym_dense",
                      {TestPackFormat::kCtPackedDense, 5, 32, false, false}},
        RoundTripCase{"ct_int5_channel_sym_padded",
                      {TestPackFormat::kCtPackedPadded, 5, 0, true, false}},
        RoundTripCase{"ct_int5_g32_asym_padded",
                      {TestPackFormat::kCtPackedPadded, 5, 32, false, false}},
        RoundTripCase{"ct_int6_g32_asym_dense",
                      {TestPackFormat::kCtPackedDense, 6, 32, false, false}},
        RoundTripCase{"ct_int7_channel_asym_dense",
                      {TestPackFormat::kCtPackedDense, 7, 0, false, false}},
        RoundTripCase{"ct_int7_g32_sym_dense",
                      {TestPackFormat::kCtPackedDense, 7, 32, true, false}},
        RoundTripCase{"ct_int7_g32_asym_padded",
                      {TestPackFormat::kCtPackedPadded, 7, 32, false, false}},
        RoundTripCase{"ct_int8_channel_sym", {TestPackFormat::kCtInt, 8, 0, true, false}},
        RoundTripCase{"ct_naive_int8_channel_sym", {TestPackFormat::kCtNaive, 8, 0, true, false}},
        RoundTripCase{"ct_int8_g32_asym", {TestPackFormat::kCtInt, 8, 32, false, false}},
        RoundTripCase{"gptq_v1_int4_g32_asym_descact",
                      {TestPackFormat::kGptqV1, 4, 32, false, true}},
        RoundTripCase{"gptq_v1_int4_g32_sym", {TestPackFormat::kGptqV1, 4, 32, true, false}},
        RoundTripCase{"gptq_v2_int4_g32_asym", {TestPackFormat::kGptqV2, 4, 32, false, false}},
        RoundTripCase{"gptq_v1_int3_g32_asym", {TestPackFormat::kGptqV1, 3, 32, false, false}},
        RoundTripCase{"gptq_v2_int8_channel_sym", {TestPackFormat::kGptqV2, 8, 0, true, false}},
        RoundTripCase{"awq_gemm_int4_g32", {TestPackFormat::kAwqGemm, 4, 32, false, false}}),
    [](const ::testing::TestParamInfo<RoundTripCase>& info) {
      return std::string(info.param.name);
    });

// auto-round's exports are GPTQ (v1 zero points for auto_gptq) and AWQ layouts under its own
// quant_method.
TEST(PrequantTest, AutoRoundExportsReadAsTheirLayouts) {
  const struct {
    const char* format;
    const char* dir;
    TestPackScheme scheme;
  } cases[] = {
      {"auto_round:auto_gptq", "ar_gptq", {TestPackFormat::kGptqV1, 4, 32, false, false}},
      {"auto_round", "ar_native", {TestPackFormat::kGptqV2, 4, 32, false, false}},
      {"auto_round:auto_awq", "ar_awq", {TestPackFormat::kAwqGemm, 4, 32, false, false}},
  };
  for (const auto& [format, dir_name, scheme] : cases) {
    SCOPED_TRACE(format);
    nlohmann::json q = {{"quant_method", "auto-round"},
                        {"packing_format", format},
                        {"bits", 4},
                        {"group_size", 32},
                        {"sym", false},
                        {"data_type", "int"}};
    std::map<std::string, TestPacked> truth;
    const fs::path dir = write_packed_model(dir_name, scheme, &truth, q);
    auto src = ModelSource::open(dir);
    ASSERT_TRUE(src.ok()) << src.status().message();
    const auto& [module, t] = *truth.begin();
    auto p = src->read_packed(module + ".weight");
    ASSERT_TRUE(p.ok()) << p.status().message();
    EXPECT_EQ(p->codes, t.codes);
    EXPECT_EQ(p->zeros, t.zeros);
    EXPECT_EQ(p->scales, t.scales);
  }
}

Status parse_q(const nlohmann::json& q) {
  nlohmann::json cfg = {{"architectures", {"LlamaForCausalLM"}}, {"quantization_config", q}};
  return parse_prequant_config(cfg.dump(), "/m/config.json").status();
}

TEST(PrequantTest, UnsupportedFormatsExit3NamingTheFormatAndTheKey) {
  const nlohmann::json fp8_weights = {{"num_bits", 8}, {"type", "float"}, {"strategy", "channel"}};
  const struct {
    nlohmann::json q;
    const char* key;
    const char* names;
  } cases[] = {
      {{{"quant_method", "fp8"}}, "quantization_config.quant_method", "'fp8'"},
      {{{"quant_method", "bitsandbytes"}}, "quantization_config.quant_method", "bitsandbytes"},
      {{{"quant_method", "compressed-tensors"},
        {"format", "float-quantized"},
        {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", fp8_weights}}}}}},
       "quantization_config.format",
       "float-quantized"},
      {{{"quant_method", "compressed-tensors"},
        {"format", "nvfp4-pack-quantized"},
        {"config_groups", nlohmann::json::object()}},
       "quantization_config.format",
       "nvfp4-pack-quantized"},
      {{{"quant_method", "compressed-tensors"},
        {"format", "mixed-precision"},
        {"config_groups", {{"group_0", {{"targets", {"Linear"}}, {"weights", fp8_weights}}}}}},
       "quantization_config.config_groups.group_0.weights.type",
       "float"},
      {{{"quant_method", "compressed-tensors"},
        {"format", "pack-quantized"},
        {"sparsity_config", {{"format", "sparse-24-bitmask"}}}},
       "quantization_config.sparsity_config.format",
       "sparse-24-bitmask"},
      {{{"quant_method", "gptq"}, {"bits", 4}, {"checkpoint_format", "marlin"}},
       "quantization_config.checkpoint_format",
       "marlin"},
      {{{"quant_method", "awq"}, {"bits", 4}, {"version", "exllama"}},
       "quantization_config.version",
       "exllama"},
      {{{"quant_method", "auto-round"}, {"packing_format", "auto_round:fp8_static"}},
       "quantization_config.packing_format",
       "fp8_static"},
  };
  for (const auto& c : cases) {
    const Status s = parse_q(c.q);
    SCOPED_TRACE(c.q.dump());
    EXPECT_EQ(s.code(), Code::kUnimplemented) << s.message();
    EXPECT_NE(s.message().find("/m/config.json"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(c.key), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(c.names), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("use the float checkpoint"), std::string::npos) << s.message();
  }
}

TEST(PrequantTest, ParsesSchemesIgnoreAndKvCacheScheme) {
  nlohmann::json cfg = {
      {"architectures", {"LlamaForCausalLM"}},
      {"quantization_config",
       {{"quant_method", "compressed-tensors"},
        {"format", "pack-quantized"},
        {"config_groups",
         {{"group_0",
           {{"targets", {"Linear"}},
            {"weights",
             {{"num_bits", 4},
              {"strategy", "group"},
              {"group_size", 128},
              {"symmetric", false},
              {"actorder", "weight"}}}}}}},
        {"ignore", {"lm_head", "re:.*vision.*"}},
        {"kv_cache_scheme", {{"num_bits", 8}, {"type", "int"}, {"strategy", "tensor"}}}}}};
  auto c = parse_prequant_config(cfg.dump(), "c.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  ASSERT_TRUE(c->has_value());
  const PrequantConfig& q = **c;
  ASSERT_EQ(q.schemes.size(), 1u);
  EXPECT_EQ(q.schemes[0].layout, PackLayout::kCtPacked);
  EXPECT_EQ(q.schemes[0].args.bits, 4);
  EXPECT_EQ(q.schemes[0].args.group_size, 128);
  EXPECT_FALSE(q.schemes[0].args.symmetric);
  EXPECT_TRUE(q.schemes[0].args.act_order);
  EXPECT_EQ(q.ignore.size(), 2u);
  EXPECT_EQ(q.kv_cache_bits, 8);
  EXPECT_NE(q.describe().find("int4 group 128 asymmetric act-order"), std::string::npos)
      << q.describe();
  // No quantization_config: nothing.
  auto none = parse_prequant_config(R"({"architectures": ["LlamaForCausalLM"]})", "c.json");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST(PrequantTest, IgnoredModuleStoredPackedIsAnErrorNamingTensorAndKey) {
  TestPackScheme s{TestPackFormat::kCtPackedDense, 4, 32, true, false};
  nlohmann::json q = ::qbc::testing::test_quantization_config(s);
  q["ignore"] = {"lm_head", "re:.*layers\\.1\\.mlp\\.down_proj"};
  std::map<std::string, TestPacked> truth;
  const fs::path dir = write_packed_model("ct_ignored", s, &truth, q);
  auto src = ModelSource::open(dir);
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("model.layers.1.mlp.down_proj.weight_packed"),
            std::string::npos)
      << src.status().message();
  EXPECT_NE(src.status().message().find("quantization_config.ignore"), std::string::npos);
}

TEST(PrequantTest, BrokenPartsAreErrorsNamingFileAndTensor) {
  TestPackScheme s{TestPackFormat::kGptqV2, 4, 32, false, true};
  std::map<std::string, TestPacked> truth;
  const fs::path dir = write_packed_model("gptq_broken", s, &truth);
  // A g_idx entry outside the groups.
  auto st = SafetensorsFile::open(dir / "model.safetensors");
  ASSERT_TRUE(st.ok());
  std::vector<tensorfile::TensorToWrite> out;
  for (const SafetensorsTensor& t : st->tensors()) {
    tensorfile::TensorToWrite w{t.name, t.dtype, t.shape,
                                std::vector<uint8_t>(t.data.data, t.data.data + t.data.size)};
    if (t.name == "model.layers.0.mlp.up_proj.g_idx") w.data[0] = 99;
    if (t.name == "model.layers.1.self_attn.k_proj.qzeros") continue;
    out.push_back(std::move(w));
  }
  QBC_ASSERT_OK(tensorfile::write_safetensors(dir / "model.safetensors", out));
  auto src = ModelSource::open(dir);
  ASSERT_FALSE(src.ok());  // Asymmetric without qzeros.
  EXPECT_NE(src.status().message().find("model.layers.1.self_attn.k_proj.qzeros"),
            std::string::npos)
      << src.status().message();
  nlohmann::json cfg = nlohmann::json::parse(::qbc::testing::read_file(dir / "config.json"));
  cfg["quantization_config"]["sym"] = true;  // qzeros optional now.
  ::qbc::testing::write_file(dir / "config.json", cfg.dump());
  src = ModelSource::open(dir);
  ASSERT_TRUE(src.ok()) << src.status().message();
  auto p = src->read_packed("model.layers.0.mlp.up_proj.weight");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("model.layers.0.mlp.up_proj.g_idx"), std::string::npos)
      << p.status().message();
  EXPECT_NE(p.status().message().find("group index 99"), std::string::npos);
  std::vector<float> w;
  EXPECT_FALSE(src->read_f32("model.layers.0.mlp.up_proj.weight", &w).ok());
}

// GPTQModel `dynamic` (per-module overrides): keys are regexes matched at the start of the
// module name, "-:" keeps the module float, "+:" or no prefix overrides bits / group_size /
// sym / desc_act, and the first matching rule in the file's order applies.
nlohmann::ordered_json dynamic_gptq_config() {
  nlohmann::ordered_json q = {{"quant_method", "gptq"}, {"bits", 4},
                              {"group_size", 32},       {"desc_act", false},
                              {"sym", false},           {"checkpoint_format", "gptq_v2"}};
  q["dynamic"] = nlohmann::ordered_json::object();
  q["dynamic"]["-:model\\.layers\\.1\\.self_attn\\.o_proj"] = nlohmann::ordered_json::object();
  q["dynamic"]["+:model\\.layers\\.1\\..*"] = {{"bits", 8}, {"group_size", -1}, {"sym", true}};
  q["dynamic"][".*down_proj"] = {{"bits", 3}, {"damp_percent", 0.05}};
  return q;
}

// The scheme the test packer uses for `module` under dynamic_gptq_config().
void dynamic_scheme(const std::string& module, TestPackScheme& s) {
  if (module == "model.layers.1.self_attn.o_proj") {
    s.bits = 16;  // stored float
  } else if (module.rfind("model.layers.1.", 0) == 0) {
    s.bits = 8;
    s.group = 0;
    s.symmetric = true;
  } else if (module.find("down_proj") != std::string::npos) {
    s.bits = 3;
  }
}

// Writes the packed model with `qconfig` in config.json in its own key order.
fs::path write_dynamic_model(const std::string& name, const nlohmann::ordered_json& qconfig,
                             std::map<std::string, TestPacked>* truth) {
  const TestPackScheme base{TestPackFormat::kGptqV2, 4, 32, false, false};
  RandomModelOptions o;
  o.output_dir = ::qbc::testing::temp_dir() / name;
  o.seed = 13;
  o.overrides = ::qbc::testing::shrink();
  EXPECT_TRUE(write_random_model(o).ok());
  *truth = ::qbc::testing::test_pack_model(o.output_dir, base, nullptr, dynamic_scheme);
  nlohmann::ordered_json cfg =
      nlohmann::ordered_json::parse(::qbc::testing::read_file(o.output_dir / "config.json"));
  cfg["quantization_config"] = qconfig;
  ::qbc::testing::write_file(o.output_dir / "config.json", cfg.dump(2));
  return o.output_dir;
}

TEST(PrequantDynamicTest, GptqModelDynamicRulesSetEachModulesBitsAndGroups) {
  auto c = parse_prequant_config(
      nlohmann::ordered_json{{"quantization_config", dynamic_gptq_config()}}.dump(), "c.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  const PrequantConfig& q = **c;
  ASSERT_EQ(q.dynamic.size(), 3u);
  // The file's order, not the sorted one ("+:" < "-:" < ".").
  EXPECT_TRUE(q.dynamic[0].exclude);
  EXPECT_EQ(q.dynamic[0].regex, "model\\.layers\\.1\\.self_attn\\.o_proj");
  EXPECT_FALSE(q.dynamic[1].exclude);
  EXPECT_EQ(q.dynamic[1].args.bits, 8);
  EXPECT_EQ(q.dynamic[1].args.group_size, 0);
  EXPECT_TRUE(q.dynamic[1].args.symmetric);
  EXPECT_EQ(q.dynamic[2].regex, ".*down_proj");
  EXPECT_EQ(q.dynamic[2].args.bits, 3);
  EXPECT_EQ(q.dynamic[2].args.group_size, 32);  // the base scheme's
  EXPECT_FALSE(q.dynamic[2].args.symmetric);
  EXPECT_NE(q.describe().find("dynamic 3 rules"), std::string::npos) << q.describe();

  std::map<std::string, TestPacked> truth;
  const fs::path dir = write_dynamic_model("gptq_dynamic", dynamic_gptq_config(), &truth);
  ASSERT_EQ(truth.size(), 13u);  // layer 1's o_proj stays float
  auto src = ModelSource::open(dir);
  ASSERT_TRUE(src.ok()) << src.status().message();
  QBC_ASSERT_OK(src->validate());
  EXPECT_EQ(src->packed_linears().size(), 13u);
  for (const auto& [module, t] : truth) {
    SCOPED_TRACE(module);
    auto p = src->read_packed(module + ".weight");
    ASSERT_TRUE(p.ok()) << p.status().message();
    TestPackScheme expect{TestPackFormat::kGptqV2, 4, 32, false, false};
    dynamic_scheme(module, expect);
    EXPECT_EQ(p->bits, expect.bits);
    EXPECT_EQ(p->num_groups, t.groups);
    EXPECT_EQ(p->codes, t.codes);
    EXPECT_EQ(p->scales, t.scales);
    EXPECT_EQ(p->zeros, t.zeros);
  }
  // The float module reads as the float it is.
  std::vector<float> o_proj;
  QBC_ASSERT_OK(src->read_f32("model.layers.1.self_attn.o_proj.weight", &o_proj));
  EXPECT_EQ(o_proj.size(), 64u * 64u);
}

TEST(PrequantDynamicTest, PackedModuleAFloatRuleCoversIsAnErrorNamingThePattern) {
  nlohmann::ordered_json reordered = dynamic_gptq_config();
  reordered["dynamic"] = nlohmann::ordered_json::object();
  reordered["dynamic"]["-:.*layers\\.0\\.self_attn\\.q_proj"] = nlohmann::ordered_json::object();
  const nlohmann::ordered_json base = dynamic_gptq_config();
  for (const auto& [k, v] : base["dynamic"].items()) reordered["dynamic"][k] = v;
  std::map<std::string, TestPacked> truth;
  const fs::path dir = write_dynamic_model("gptq_dynamic_float", reordered, &truth);
  auto src = ModelSource::open(dir);
  ASSERT_FALSE(src.ok());
  const std::string m = src.status().message();
  EXPECT_NE(m.find("model.layers.0.self_attn.q_proj.qweight"), std::string::npos) << m;
  EXPECT_NE(m.find("quantization_config.dynamic"), std::string::npos) << m;
  EXPECT_NE(m.find("-:.*layers\\.0\\.self_attn\\.q_proj"), std::string::npos) << m;
}

TEST(PrequantDynamicTest, PatternQbcCannotReadExits3NamingIt) {
  nlohmann::ordered_json q = dynamic_gptq_config();
  q["dynamic"]["(?P<layer>model\\.layers\\.0)\\..*"] = {{"bits", 8}};
  auto c =
      parse_prequant_config(nlohmann::ordered_json{{"quantization_config", q}}.dump(), "c.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kUnimplemented);
  EXPECT_NE(c.status().message().find("(?P<layer>"), std::string::npos) << c.status().message();
  // An override outside 2 to 8 bits is refused naming the rule's key.
  nlohmann::ordered_json b = dynamic_gptq_config();
  b["dynamic"]["+:model\\.layers\\.1\\..*"]["bits"] = 16;
  auto cb =
      parse_prequant_config(nlohmann::ordered_json{{"quantization_config", b}}.dump(), "c.json");
  ASSERT_FALSE(cb.ok());
  EXPECT_EQ(cb.status().code(), Code::kUnimplemented);
  EXPECT_NE(cb.status().message().find("dynamic"), std::string::npos) << cb.status().message();
}

TEST(PrequantDynamicTest, AHugeRuleKeyIsShownByItsPrefixNeverWhole) {
  // fuzz_prequant_config (session 35): a 4 KB `dynamic` key whose rule has a bad value made a
  // 4,100-byte error message, the key echoed whole through the config reader's key path.
  nlohmann::ordered_json q = dynamic_gptq_config();
  const std::string key = "+:model\\.layers\\.(" + std::string(4000, '@') + ")\x01";
  q["dynamic"][key] = {{"bits", "eight"}};
  auto c =
      parse_prequant_config(nlohmann::ordered_json{{"quantization_config", q}}.dump(), "c.json");
  ASSERT_FALSE(c.ok());
  const std::string m = c.status().message();
  EXPECT_LT(m.size(), 512u) << m.size() << " bytes";
  EXPECT_NE(m.find("quantization_config.dynamic.+:model"), std::string::npos) << m;
  EXPECT_NE(m.find("bits"), std::string::npos) << m;
  EXPECT_EQ(m.find(std::string(200, '@')), std::string::npos) << "the key echoed whole";
}

}  // namespace
}  // namespace qbc::frontend
