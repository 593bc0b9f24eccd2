// Pre-quantized HF checkpoints from the command line: a random model packed by the test packer
// (tests/support/prequant_packer.h, from the published layouts) in every format compiles to
// MXQ; where qbc's weights can hold the codes, the quantized MBLT's integer weights are exactly
// the packed codes, scales and zero points, and compile / inspect say so per tensor kind.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "prequant_packer.h"
#include "qbc/frontend/random_model.h"
#include "qbc/frontend/safetensors.h"
#include "qbc/tensorfile/safetensors_writer.h"
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
                      std::map<std::string, TestPacked>* truth,
                      const ::qbc::testing::TestPackPerModule& per_module = {}) {
  const frontend::RandomModelOptions o =
      ::qbc::testing::small_llama_options(temp_dir() / name / "hf", 5, 96);
  EXPECT_TRUE(frontend::write_random_model(o).ok());
  *truth = ::qbc::testing::test_pack_model(o.output_dir, s,
                                           ::qbc::testing::test_quantization_config(s), per_module);
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
  int kept;  ///< Linears (of 14) whose codes qbc's weights hold.
};

// The column order a test-side reader of act-order groups would choose: columns sorted by their
// g_idx, ties in checkpoint order (GPTQ's own `desc_act` packing sorts the same way).
std::vector<int64_t> by_group(const std::vector<int32_t>& g_idx) {
  std::vector<int64_t> perm(g_idx.size());
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
    return g_idx[static_cast<size_t>(a)] < g_idx[static_cast<size_t>(b)];
  });
  return perm;
}

// Act order: a down_proj reads the gated product of gate and up, whose rows qbc permutes, so its
// codes are kept with the columns in group order; the other six linears of a layer read a norm
// or the attention output and are re-quantized.
bool permuted_in_graph(const std::string& module) {
  return module.size() > 13 && module.substr(module.size() - 13) == "mlp.down_proj";
}

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
  EXPECT_EQ(iw["kept"].get<int>(), c.kept);
  ASSERT_EQ(iw["kinds"].size(), 7u);
  for (const auto& k : iw["kinds"]) EXPECT_EQ(k["imported"].get<int>(), 2) << k.dump();
  if (c.scheme.act_order) {
    EXPECT_TRUE(contains(iw.dump(), "act-order groups")) << iw.dump();
    ASSERT_TRUE(iw.contains("act_order")) << iw.dump();
    EXPECT_EQ(iw["act_order"]["permuted"].get<int>(), 2);
    EXPECT_EQ(iw["act_order"]["requantized"].get<int>(), 12);
    EXPECT_TRUE(contains(r.err, "act-order: 2 kept as a column permutation")) << r.err;
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
    if (c.scheme.act_order) {
      if (!permuted_in_graph(module)) {
        EXPECT_NE(codes, expect);  // re-quantized by the recipe (W8 RTN)
        continue;
      }
      // Kept with the columns in group order: column j is checkpoint column perm[j].
      const std::vector<int64_t> perm = by_group(t.g_idx);
      const std::vector<int64_t> stored = expect;
      for (int64_t o = 0; o < t.out; ++o) {
        for (int64_t j = 0; j < t.in; ++j) {
          expect[static_cast<size_t>(o * t.in + j)] =
              stored[static_cast<size_t>(o * t.in + perm[static_cast<size_t>(j)])];
        }
      }
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
  EXPECT_TRUE(contains(
      mblt.out, "self_attn.q_proj: kept " + std::to_string(c.scheme.act_order ? 0 : 2) + " of 2"))
      << mblt.out;
  if (c.scheme.act_order) {
    EXPECT_TRUE(contains(mblt.out, "mlp.down_proj: kept 2 of 2")) << mblt.out;
    EXPECT_TRUE(contains(mblt.out, "act-order: 2 kept as a column permutation, 12 re-quantized"))
        << mblt.out;
  }
  const auto mxq = run_qbc("inspect --json " + shell_quote(dir / "q.mxq"));
  ASSERT_EQ(mxq.exit_code, 0) << mxq.err;
  const nlohmann::json j = nlohmann::json::parse(mxq.out);
  EXPECT_EQ(j["provenance"]["weights"]["kept"].get<int>(), c.kept) << mxq.out;
}

INSTANTIATE_TEST_SUITE_P(
    Formats, PrequantCli,
    ::testing::Values(
        CliCase{"ct_w4_g32_sym", {TestPackFormat::kCtPackedDense, 4, 32, true, false}, 14},
        CliCase{"ct_w4_g32_asym", {TestPackFormat::kCtPackedDense, 4, 32, false, false}, 14},
        CliCase{"ct_w8_channel", {TestPackFormat::kCtInt, 8, 0, true, false}, 14},
        CliCase{"ct_w4_actorder", {TestPackFormat::kCtPackedDense, 4, 32, true, true}, 2},
        CliCase{"gptq_v1_w4_g32", {TestPackFormat::kGptqV1, 4, 32, false, false}, 14},
        CliCase{"gptq_v2_w4_g32_sym", {TestPackFormat::kGptqV2, 4, 32, true, false}, 14},
        CliCase{"gptq_v1_descact", {TestPackFormat::kGptqV1, 4, 32, false, true}, 2},
        CliCase{"gptq_v2_w8_channel", {TestPackFormat::kGptqV2, 8, 0, true, false}, 14},
        CliCase{"awq_gemm_w4_g32", {TestPackFormat::kAwqGemm, 4, 32, false, false}, 14}),
    [](const ::testing::TestParamInfo<CliCase>& info) { return std::string(info.param.name); });

// GPTQ desc_act on the down projections only (the others contiguous): every code is kept, the
// down projections' columns in group order and the gate / up rows in the same order, and the MXQ
// is as close to the checkpoint's own float model as the same checkpoint without act order.
TEST(PrequantCliActOrder, DownProjKeptAsAColumnPermutationAndTheModelUnchanged) {
  QBC_REQUIRE_SHARED(eval_text, "data/tinystories/eval.clean.txt");
  double kld[2] = {0, 0};
  for (int act = 0; act < 2; ++act) {
    SCOPED_TRACE(act ? "act order" : "contiguous");
    const TestPackScheme s{TestPackFormat::kGptqV1, 4, 32, false, act == 1};
    std::map<std::string, TestPacked> truth;
    const fs::path hf = packed_model(act ? "actorder_down" : "actorder_none", s, &truth,
                                     [](const std::string& module, TestPackScheme& m) {
                                       m.act_order = m.act_order && permuted_in_graph(module);
                                     });
    const fs::path dir = hf.parent_path();
    const auto r = testing::run_small_compile(hf, dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json iw =
        testing::last_json_event(r.err, "summary")["result"]["imported_weights"];
    EXPECT_EQ(iw["kept"].get<int>(), 14) << iw.dump();
    if (act) {
      EXPECT_EQ(iw["act_order"]["permuted"].get<int>(), 2) << iw.dump();
      EXPECT_EQ(iw["act_order"]["requantized"].get<int>(), 0) << iw.dump();
    } else {
      EXPECT_FALSE(iw.contains("act_order")) << iw.dump();
    }
    auto side = frontend::SafetensorsFile::open(dir / "q.weights.safetensors");
    ASSERT_TRUE(side.ok()) << side.status().message();
    for (int layer = 0; layer < 2; ++layer) {
      const std::string mlp = "model.layers." + std::to_string(layer) + ".mlp.";
      const TestPacked& down = truth.at(mlp + "down_proj");
      const std::vector<int64_t> perm = by_group(down.g_idx);
      for (const char* name : {"gate_proj", "up_proj", "down_proj"}) {
        SCOPED_TRACE(mlp + name);
        const TestPacked& t = truth.at(mlp + name);
        const frontend::SafetensorsTensor* wq =
            side->find(testing::linear_node_of(mlp + name) + ".wq");
        ASSERT_NE(wq, nullptr);
        const std::vector<int64_t> got = ints_of(*wq);
        ASSERT_EQ(got.size(), t.codes.size());
        const bool is_down = std::string(name) == "down_proj";
        for (int64_t o = 0; o < t.out; ++o) {
          for (int64_t i = 0; i < t.in; ++i) {
            // down: column i is checkpoint column perm[i]; gate / up: row o is row perm[o].
            const int64_t src_o = is_down ? o : perm[static_cast<size_t>(o)];
            const int64_t src_i = is_down ? perm[static_cast<size_t>(i)] : i;
            ASSERT_EQ(got[static_cast<size_t>(o * t.in + i)],
                      t.codes[static_cast<size_t>(src_o * t.in + src_i)] - 8)
                << o << "," << i;
          }
        }
      }
    }
    const auto ev =
        run_qbc("eval " + shell_quote(dir / "q.mxq") + " --reference " + shell_quote(hf) +
                " --text " + shell_quote(eval_text) + " --ctx 64 --chunks 8 --json");
    ASSERT_EQ(ev.exit_code, 0) << ev.err;
    const nlohmann::json acc = nlohmann::json::parse(ev.out);
    kld[act] = acc["kld_mean"].get<double>();
    std::printf("%s: MXQ vs the checkpoint's float model: kld_mean %.6f, top1 %.4f\n",
                act ? "act order" : "contiguous", kld[act], acc["top1"].get<double>());
  }
  // Measured: KLD 0.000231 with act order, 0.000232 without. A permutation missing on either
  // side would leave the down projection reading the wrong inputs, far from the reference.
  EXPECT_LT(kld[1], 0.02);
  EXPECT_LT(kld[1], 2 * kld[0] + 0.002);
}

// Rewrites config.json's quantization_config as `q`, in its own key order.
void set_qconfig(const fs::path& hf, const nlohmann::ordered_json& q) {
  auto cfg = nlohmann::ordered_json::parse(::qbc::testing::read_file(hf / "config.json"));
  cfg["quantization_config"] = q;
  ::qbc::testing::write_file(hf / "config.json", cfg.dump(2));
}

// The quantized MBLT's integer weights of every packed module are its packed codes, scales and
// zero points (GPTQ-style unsigned codes move down by 2^(b-1)); `per_module` gives each
// module's scheme.
void expect_codes_kept(const fs::path& dir, const std::map<std::string, TestPacked>& truth,
                       const TestPackScheme& base,
                       const ::qbc::testing::TestPackPerModule& per_module = {}) {
  auto side = frontend::SafetensorsFile::open(dir / "q.weights.safetensors");
  ASSERT_TRUE(side.ok()) << side.status().message();
  for (const auto& [module, t] : truth) {
    SCOPED_TRACE(module);
    TestPackScheme s = base;
    if (per_module) per_module(module, s);
    const int32_t shift = ::qbc::testing::test_pack_is_ct(s.format) ? 0 : 1 << (s.bits - 1);
    const std::string node = testing::linear_node_of(module);
    const frontend::SafetensorsTensor* wq = side->find(node + ".wq");
    const frontend::SafetensorsTensor* ws = side->find(node + ".wscale");
    ASSERT_NE(wq, nullptr);
    ASSERT_NE(ws, nullptr);
    std::vector<int64_t> expect(t.codes.begin(), t.codes.end());
    for (int64_t& q : expect) q -= shift;
    EXPECT_EQ(ints_of(*wq), expect);
    std::vector<float> scales;
    ASSERT_TRUE(frontend::read_f32(*ws, &scales).ok());
    EXPECT_EQ(scales, t.scales);
    const frontend::SafetensorsTensor* wz = side->find(node + ".wzero");
    ASSERT_EQ(wz != nullptr, !s.symmetric);
    if (wz != nullptr) {
      std::vector<int64_t> zexpect(t.zeros.begin(), t.zeros.end());
      for (int64_t& z : zexpect) z -= shift;
      EXPECT_EQ(ints_of(*wz), zexpect);
    }
  }
}

// auto-round's auto_gptq export (GPTQ v1 tensors under quant_method auto-round) compiles end
// to end with every code kept.
TEST(PrequantCliExports, AutoRoundGptqExportKeepsEveryCode) {
  const TestPackScheme s{TestPackFormat::kGptqV1, 4, 32, false, false};
  std::map<std::string, TestPacked> truth;
  const fs::path hf = packed_model("auto_round_gptq", s, &truth);
  set_qconfig(hf, {{"quant_method", "auto-round"},
                   {"packing_format", "auto_round:auto_gptq"},
                   {"bits", 4},
                   {"group_size", 32},
                   {"sym", false},
                   {"data_type", "int"}});
  const auto r = testing::run_small_compile(hf, hf.parent_path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json iw =
      testing::last_json_event(r.err, "summary")["result"]["imported_weights"];
  EXPECT_EQ(iw["imported"].get<int>(), 14) << iw.dump();
  EXPECT_EQ(iw["kept"].get<int>(), 14) << iw.dump();
  EXPECT_TRUE(contains(r.err, "codes kept 14 of 14")) << r.err;
  expect_codes_kept(hf.parent_path(), truth, s);
}

// GPTQModel `dynamic`: layer 1 int8 per channel symmetric, layer 1's o_proj left float ("-:"),
// the rest the base int4 groups of 32: the 13 packed linears all keep their codes.
void dynamic_scheme(const std::string& module, TestPackScheme& s) {
  if (module == "model.layers.1.self_attn.o_proj") {
    s.bits = 16;
  } else if (module.rfind("model.layers.1.", 0) == 0) {
    s.bits = 8;
    s.group = 0;
    s.symmetric = true;
  }
}

TEST(PrequantCliExports, GptqModelDynamicRulesKeepEveryPackedCode) {
  const TestPackScheme s{TestPackFormat::kGptqV2, 4, 32, false, false};
  std::map<std::string, TestPacked> truth;
  const fs::path hf = packed_model("gptq_dynamic", s, &truth, dynamic_scheme);
  ASSERT_EQ(truth.size(), 13u);
  nlohmann::ordered_json q = {{"quant_method", "gptq"}, {"bits", 4},
                              {"group_size", 32},       {"desc_act", false},
                              {"sym", false},           {"checkpoint_format", "gptq_v2"}};
  q["dynamic"] = nlohmann::ordered_json::object();
  q["dynamic"]["-:model\\.layers\\.1\\.self_attn\\.o_proj"] = nlohmann::ordered_json::object();
  q["dynamic"]["+:model\\.layers\\.1\\..*"] = {{"bits", 8}, {"group_size", -1}, {"sym", true}};
  set_qconfig(hf, q);
  const auto r = testing::run_small_compile(hf, hf.parent_path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json iw =
      testing::last_json_event(r.err, "summary")["result"]["imported_weights"];
  EXPECT_EQ(iw["imported"].get<int>(), 13) << iw.dump();
  EXPECT_EQ(iw["kept"].get<int>(), 13) << iw.dump();
  EXPECT_TRUE(contains(r.err, "codes kept 13 of 13")) << r.err;
  expect_codes_kept(hf.parent_path(), truth, s, dynamic_scheme);
}

// Under --preset llm every weight-changing pass the preset turns on is skipped for the imported
// linears and listed in the summary; a kv_cache_scheme with the checkpoint's k/v scale tensors
// is noted (qbc calibrates the KV cache itself) and the scale tensors are accepted.
TEST(PrequantCliExports, PresetLlmListsSkippedPassesAndNotesTheKvCacheScheme) {
  const TestPackScheme s{TestPackFormat::kCtPackedDense, 4, 32, true, false};
  std::map<std::string, TestPacked> truth;
  const fs::path hf = packed_model("ct_llm_kv", s, &truth);
  nlohmann::ordered_json q = ::qbc::testing::test_quantization_config(s);
  q["kv_cache_scheme"] = {
      {"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "tensor"}};
  set_qconfig(hf, q);
  {
    auto st = frontend::SafetensorsFile::open(hf / "model.safetensors");
    ASSERT_TRUE(st.ok()) << st.status().message();
    std::vector<tensorfile::TensorToWrite> out;
    for (const frontend::SafetensorsTensor& t : st->tensors()) {
      out.push_back(
          {t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data.data, t.data.data + t.data.size)});
    }
    for (int layer = 0; layer < 2; ++layer) {
      const std::string a = "model.layers." + std::to_string(layer) + ".self_attn.";
      out.push_back(tensorfile::make_tensor(a + "k_scale", tensorfile::DType::kF32, {}, {0.02f}));
      out.push_back(tensorfile::make_tensor(a + "v_scale", tensorfile::DType::kF32, {}, {0.01f}));
    }
    ASSERT_TRUE(tensorfile::write_safetensors(hf / "model.safetensors", out).ok());
  }
  const fs::path dir = hf.parent_path();
  const auto r = run_qbc("--log-format json compile " + shell_quote(hf) +
                         " --preset llm --use-random-calib --set calibration.numSamples=2 "
                         "--set calibration.seqLength=16 --set llm.attributes.maxCacheLength=64 "
                         "--set llm.attributes.maxSequenceLength=64 -o " +
                         shell_quote(dir / "q.mxq") + " --keep-intermediate " + shell_quote(dir));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json iw =
      testing::last_json_event(r.err, "summary")["result"]["imported_weights"];
  EXPECT_EQ(iw["kept"].get<int>(), 14) << iw.dump();
  const auto skipped = iw["skipped_passes"].get<std::vector<std::string>>();
  for (const char* pass : {"normConv", "spinR1", "spinR2", "qk", "vo", "ud", "searchWeightScale"}) {
    EXPECT_NE(std::find(skipped.begin(), skipped.end(), pass), skipped.end())
        << pass << " in " << iw.dump();
  }
  EXPECT_TRUE(contains(r.err, "skipped for the imported linears")) << r.err;
  ASSERT_TRUE(iw.contains("kv_cache")) << iw.dump();
  const std::string kv = iw["kv_cache"].get<std::string>();
  EXPECT_TRUE(contains(kv, "kv_cache_scheme")) << kv;
  EXPECT_TRUE(contains(kv, "k/v scales are not used")) << kv;
  EXPECT_TRUE(contains(r.err, "the checkpoint's k/v scales are not used")) << r.err;
  expect_codes_kept(dir, truth, s);
}

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

// Bits by budget chooses the bits of a float checkpoint: a pre-quantized one keeps its codes and
// their widths, so --target-size is refused (exit 2, naming the flag) before any work, and no
// output is left.
TEST(PrequantCliErrors, BitsByBudgetRefusesAPrequantizedCheckpoint) {
  std::map<std::string, TestPacked> truth;
  const fs::path hf =
      packed_model("budget", {TestPackFormat::kCtPackedDense, 4, 32, true, false}, &truth);
  const fs::path out = hf.parent_path() / "budget.mxq";
  const auto r =
      run_qbc("compile " + shell_quote(hf) +
              " --preset llm_fast --use-random-calib --target-size 1MiB -o " + shell_quote(out));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--target-size")) << r.err;
  EXPECT_TRUE(contains(r.err, "pre-quantized checkpoint")) << r.err;
  EXPECT_TRUE(contains(r.err, "keep their codes")) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

// A second weight image per phase needs the float weights: on imported codes it is refused
// (exit 3), naming the linear and the key, and nothing is written.
TEST(PrequantCliErrors, PhaseImageRefusesImportedCodes) {
  std::map<std::string, TestPacked> truth;
  const fs::path hf =
      packed_model("phase", {TestPackFormat::kCtPackedDense, 4, 32, true, false}, &truth);
  const fs::path out = hf.parent_path() / "phase.mxq";
  const auto r = run_qbc("compile " + shell_quote(hf) +
                         " --preset llm_fast --use-random-calib --set bit.prefill.weight=8 -o " +
                         shell_quote(out));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(contains(r.err, "bit.prefill.weight 8")) << r.err;
  EXPECT_TRUE(contains(r.err, "imported from a pre-quantized checkpoint")) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace qbc
