// The ARIES backend from the command line: qbc compile runs it (and refuses a model that
// does not fit before calibrating), qbc inspect --memory/--program show its plan and
// programs, qbc run/eval --backend npu execute the programs with the fake-quant logits.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::run_qbc;
using ::qbc::testing::shell_quote;
using ::qbc::testing::temp_dir;
using ::qbc::testing::write_file;

/// stories260K quantized once (W8, random calibration) by `qbc compile`.
const fs::path& compiled() {
  static const fs::path out = [] {
    const fs::path p = temp_dir() / "backend_cli" / "s.mblt";
    fs::create_directories(p.parent_path());
    const auto r =
        run_qbc("compile " + shell_quote(testing::shared_dir() / "models/stories260k/hf") +
                " --preset llm_fast --use-random-calib --set llm.attributes.maxCacheLength=512 "
                "--set llm.attributes.maxSequenceLength=512 -o " +
                shell_quote(p.parent_path() / "s.mxq") + " --keep-intermediate " +
                shell_quote(p.parent_path()));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(contains(r.err + r.out, "backend for aries-rb")) << r.err;
    return p;
  }();
  return out;
}

TEST(BackendCli, InspectMemoryJsonHasTheStableKeys) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const auto r = run_qbc("inspect " + shell_quote(compiled()) + " --memory --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  int64_t sum = 0;
  for (const char* k : {"weights_bytes", "kv_bytes", "activation_bytes", "scratch_bytes",
                        "io_bytes", "reserve_bytes"}) {
    ASSERT_TRUE(j["dram"].contains(k)) << k;
    sum += j["dram"][k].get<int64_t>();
  }
  EXPECT_EQ(j["dram"]["total_bytes"].get<int64_t>(), sum);
  EXPECT_EQ(j["dram"]["device_bytes"].get<int64_t>(), int64_t{17179869184});
  ASSERT_EQ(j["sram_peak_bytes"].size(), 8u);
  EXPECT_GT(j["sram_peak_bytes"][0].get<int64_t>(), 0);
  EXPECT_LE(j["sram_peak_bytes"][0].get<int64_t>(), j["sram_bytes_per_core"].get<int64_t>());
  EXPECT_GT(j["program_bytes"].get<int64_t>(), 0);
  // 5 layers x 4 KV heads x (K + V) rows of 8 codes padded to the 64-byte DMA alignment.
  EXPECT_EQ(j["kv_bytes_per_position"].get<int64_t>(), 5 * 4 * 2 * 64);
  EXPECT_EQ(j["dram"]["kv_bytes"].get<int64_t>(), 512 * 5 * 4 * 2 * 64);
}

TEST(BackendCli, InspectProgramPrintsEveryCoreWithNodesAndPasses) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const auto r = run_qbc("inspect " + shell_quote(compiled()) +
                         " --program --target-profile test-2core --set "
                         "llm.attributes.maxCoreDataLength=16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* want :
       {"matmul", "requant", "quantize", "qk_scores", "exp_accum", "attn_out", "kv_quant",
        "rms_norm", "blk.4.ffn.down_proj", "lower-attention", "prefill", "decode", "loop"}) {
    EXPECT_TRUE(contains(r.out, want)) << want;
  }
}

TEST(BackendCli, RunOnTheNpuBackendGivesTheFakeQuantTokens) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const std::string base = "run " + shell_quote(compiled()) + " -p 'Once upon a time' -n 24 --ids";
  const auto npu = run_qbc(base + " --backend npu");
  const auto fq = run_qbc(base + " --backend fakequant");
  ASSERT_EQ(npu.exit_code, 0) << npu.err;
  ASSERT_EQ(fq.exit_code, 0) << fq.err;
  EXPECT_EQ(npu.out, fq.out);
  const auto bad = run_qbc(base + " --backend tpu");
  EXPECT_EQ(bad.exit_code, 2);
}

TEST(BackendCli, EvalOnTheNpuBackendGivesTheFakeQuantPerplexity) {
  QBC_REQUIRE_SHARED(text, "data/tinystories/eval.clean.txt");
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const std::string base = "eval " + shell_quote(compiled()) + " --text " + shell_quote(text) +
                           " --ctx 64 --chunks 3 --json";
  const auto npu = run_qbc(base + " --backend npu");
  const auto fq = run_qbc(base + " --backend fakequant");
  ASSERT_EQ(npu.exit_code, 0) << npu.err;
  ASSERT_EQ(fq.exit_code, 0) << fq.err;
  const auto a = nlohmann::json::parse(npu.out), b = nlohmann::json::parse(fq.out);
  EXPECT_EQ(a["perplexity"], b["perplexity"]);
}

TEST(BackendCli, CompileThatDoesNotFitExits4BeforeCalibration) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const fs::path dir = temp_dir() / "backend_cli_small";
  fs::create_directories(dir);
  const fs::path target = dir / "small.yaml";
  write_file(target, R"(name: small
description: a device too small for stories260K with a 4096-position cache
clusters: 1
coresPerCluster: 1
sramBytesPerCore: 65536
dramBytes: 4000000
dmaAlignBytes: 16
dramReserveBytes: 1000000
)");
  const fs::path out = dir / "x.mxq";
  // --context 4096: at the preset's length fitted to the model (2048) it fits (3.1 of 4.0 MB).
  const auto r = run_qbc("compile " + shell_quote(hf) +
                         " --preset llm_fast --use-random-calib --context 4096" +
                         " --target-profile " + shell_quote(target) + " -o " + shell_quote(out));
  EXPECT_EQ(r.exit_code, 4) << r.err;
  for (const char* want : {"does not fit target 'small'", "weights", "kv cache", "reserve",
                           "largest llm.attributes.maxCacheLength that fits",
                           "largest llm.attributes.runtime.batchSize that fits"}) {
    EXPECT_TRUE(contains(r.err, want)) << want << "\n" << r.err;
  }
  EXPECT_FALSE(contains(r.err, "qbc.calib")) << r.err;  // decided before calibration
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace qbc
