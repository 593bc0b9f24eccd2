// qbc plan from config.json alone, and inspect --cost on a compiled MXQ: the JSON keys
// scripts rely on, the long contexts that fit, the exit 4 of a model that does not (with the
// largest context that does), the decode rate falling with the context, W4V8 at least 1.6x
// W8, and the cost of an MXQ equal to the plan of the same configuration.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::run_qbc;
using ::qbc::testing::shell_quote;
using ::qbc::testing::temp_dir;

fs::path configs() { return testing::shared_dir() / "model-configs"; }

nlohmann::json plan_json(const std::string& args, int want_exit = 0) {
  const auto r = run_qbc("plan " + args + " --json");
  EXPECT_EQ(r.exit_code, want_exit) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
  return j;
}

TEST(PlanCli, JsonHasTheDocumentedKeysForEveryScheme) {
  QBC_REQUIRE_SHARED(dir, "model-configs/Llama-3.2-1B-Instruct");
  const nlohmann::json j = plan_json(shell_quote(dir));
  for (const char* k : {"fits", "memory", "max_context", "max_batch", "schemes"})
    EXPECT_TRUE(j.contains(k)) << k;
  for (const char* k : {"weights_bytes", "kv_bytes", "activation_bytes", "scratch_bytes",
                        "reserve_bytes", "total_bytes", "device_bytes"})
    EXPECT_TRUE(j["memory"]["dram"].contains(k)) << k;
  EXPECT_TRUE(j["memory"].contains("sram_peak_bytes"));
  EXPECT_TRUE(j["memory"].contains("program_bytes"));
  EXPECT_TRUE(j["fits"].get<bool>());
  ASSERT_EQ(j["schemes"].size(), 4u);  // single, multi, global4, global8 on aries-rb
  for (const auto& s : j["schemes"]) {
    for (const char* k :
         {"scheme", "ttft_ms", "decode_tok_s", "decode_tok_s_at_end", "roofline_fraction", "bound"})
      EXPECT_TRUE(s.contains(k)) << k;
    EXPECT_GT(s["ttft_ms"].get<double>(), 0.0);
    EXPECT_GT(s["decode_tok_s"].get<double>(), s["decode_tok_s_at_end"].get<double>());
    EXPECT_EQ(s["bound"], "dram");
  }
  // --model-config plans the same file.
  const nlohmann::json k = plan_json("--model-config " + shell_quote(dir / "config.json") +
                                     " --inference-scheme single");
  EXPECT_EQ(k["memory"], j["memory"]);
  EXPECT_EQ(k["schemes"][0], j["schemes"][0]);
}

TEST(PlanCli, Qwen3BFitsAt32KTo128KWithW8Kv8) {
  QBC_REQUIRE_SHARED(dir, "model-configs/Qwen2.5-3B-Instruct");
  int64_t prev_kv = 0;
  double prev_end = 1e9;
  for (int64_t ctx : {32768, 65536, 131072}) {
    const nlohmann::json j = plan_json(shell_quote(dir) + " --context " + std::to_string(ctx) +
                                       " --kv-bits 8 --inference-scheme single");
    EXPECT_TRUE(j["fits"].get<bool>()) << ctx;
    EXPECT_GE(j["max_context"].get<int64_t>(), ctx);
    const int64_t kv = j["memory"]["dram"]["kv_bytes"];
    // 36 layers x 2 KV heads x 128 dims x (K + V), 8-bit.
    EXPECT_EQ(kv, ctx * 36 * 2 * 128 * 2) << ctx;
    EXPECT_GT(kv, prev_kv);
    const double end = j["schemes"][0]["decode_tok_s_at_end"];
    EXPECT_LT(end, prev_end) << "decode with a full cache slows as the context grows";
    prev_kv = kv;
    prev_end = end;
  }
}

TEST(PlanCli, Llama8BAt128KWithKv16ExitsFourNamingTheLargestContext) {
  QBC_REQUIRE_SHARED(dir, "model-configs/Llama-3.1-8B-Instruct");
  const auto r = run_qbc("plan " + shell_quote(dir) +
                         " --context 131072 --kv-bits 16 --inference-scheme single");
  EXPECT_EQ(r.exit_code, 4) << r.err;
  EXPECT_TRUE(contains(r.err, "does not fit")) << r.err;
  EXPECT_TRUE(contains(r.out, "largest maxCacheLength that fits")) << r.out;
  EXPECT_TRUE(contains(r.out, "DOES NOT FIT")) << r.out;
  // The named context fits, with KV8 a larger one does.
  const nlohmann::json j16 =
      plan_json(shell_quote(dir) + " --context 131072 --kv-bits 16 --inference-scheme single", 4);
  const int64_t max16 = j16["max_context"];
  ASSERT_GT(max16, 0);
  const nlohmann::json fit = plan_json(shell_quote(dir) + " --context " + std::to_string(max16) +
                                       " --kv-bits 16 --inference-scheme single");
  EXPECT_TRUE(fit["fits"].get<bool>());
  const nlohmann::json over =
      plan_json(shell_quote(dir) + " --context " + std::to_string(max16 + 64) +
                    " --kv-bits 16 --inference-scheme single",
                4);
  EXPECT_FALSE(over["fits"].get<bool>());
  const nlohmann::json j8 =
      plan_json(shell_quote(dir) + " --context 131072 --kv-bits 8 --inference-scheme single");
  EXPECT_TRUE(j8["fits"].get<bool>());
}

TEST(PlanCli, SweepShowsDecodeFallingWithTheContext) {
  QBC_REQUIRE_SHARED(dir, "model-configs/Llama-3.2-1B-Instruct");
  const auto r = run_qbc("plan " + shell_quote(dir) + " --sweep context --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(rows.is_array()) << r.out;
  ASSERT_EQ(rows.size(), 6u);
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i]["context"].get<int64_t>(), 2 * rows[i - 1]["context"].get<int64_t>());
    EXPECT_LT(rows[i]["decode_tok_s_at_end"].get<double>(),
              rows[i - 1]["decode_tok_s_at_end"].get<double>());
    EXPECT_GT(rows[i]["kv_bytes"].get<int64_t>(), rows[i - 1]["kv_bytes"].get<int64_t>());
  }
  const auto text = run_qbc("plan " + shell_quote(dir) + " --sweep batch");
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "batch")) << text.out;
}

TEST(PlanCli, W4V8DecodesAtLeast1point6xW8OnLlama1B) {
  QBC_REQUIRE_SHARED(dir, "model-configs/Llama-3.2-1B-Instruct");
  const std::string base = shell_quote(dir) + " --inference-scheme single";
  const std::string w4v8 = base +
                           " --set bit.transformer.weight.query=4"
                           " --set bit.transformer.weight.key=4"
                           " --set bit.transformer.weight.output=4"
                           " --set bit.transformer.weight.ffn=4";
  const nlohmann::json w8 = plan_json(base);
  const nlohmann::json w4 = plan_json(w4v8 + " --set bit.transformer.weight.head=4");
  const nlohmann::json w4h8 = plan_json(w4v8);
  auto tok = [](const nlohmann::json& j) { return j["schemes"][0]["decode_tok_s"].get<double>(); };
  std::printf(
      "[plan] Llama-3.2-1B decode W8 %.2f, W4V8 %.2f (%.3fx), W4V8 with an 8-bit head %.2f "
      "(%.3fx) tok/s\n",
      tok(w8), tok(w4), tok(w4) / tok(w8), tok(w4h8), tok(w4h8) / tok(w8));
  EXPECT_GE(tok(w4) / tok(w8), 1.6);
  EXPECT_GT(tok(w4h8) / tok(w8), 1.4);  // the 263 M-weight head stays 8-bit
  EXPECT_LT(w4["memory"]["dram"]["weights_bytes"].get<int64_t>(),
            w4h8["memory"]["dram"]["weights_bytes"].get<int64_t>());
  EXPECT_LT(w4h8["memory"]["dram"]["weights_bytes"].get<int64_t>(),
            w8["memory"]["dram"]["weights_bytes"].get<int64_t>());
}

TEST(PlanCli, InspectCostOfAnMxqEqualsThePlanOfItsConfiguration) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const fs::path dir = temp_dir() / "plan_cost";
  fs::create_directories(dir);
  const std::string sets =
      " --set llm.attributes.maxSequenceLength=256 --set llm.attributes.maxCacheLength=256"
      " --inference-scheme single";
  const auto c = run_qbc("compile " + shell_quote(hf) +
                         " --use-random-calib --set calibration.numSamples=2"
                         " --set calibration.seqLength=32"
                         " --set llm.attributes.calibration.useFullSeqLength=false" +
                         sets + " -o " + shell_quote(dir / "q.mxq"));
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const auto r =
      run_qbc("inspect " + shell_quote(dir / "q.mxq") + " --cost --prompt-tokens 100 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto cost = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(cost.is_discarded()) << r.out;
  ASSERT_EQ(cost["schemes"].size(), 1u);
  EXPECT_FALSE(cost["schemes"][0]["layers"].empty());
  const nlohmann::json plan = plan_json(shell_quote(hf) + sets + " --prompt-tokens 100");
  ASSERT_EQ(plan["schemes"].size(), 1u);
  // Same program, same numbers (the plan lowers shapes, the file holds the weights).
  EXPECT_DOUBLE_EQ(cost["schemes"][0]["ttft_ms"].get<double>(),
                   plan["schemes"][0]["ttft_ms"].get<double>());
  EXPECT_DOUBLE_EQ(cost["schemes"][0]["decode_tok_s"].get<double>(),
                   plan["schemes"][0]["decode_tok_s"].get<double>());
  const auto text = run_qbc("inspect " + shell_quote(dir / "q.mxq") + " --cost");
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "blk.0.attn.q_proj")) << text.out;
  // Not an MXQ: refused with a pointer to plan.
  const auto bad = run_qbc("inspect " + shell_quote(hf) + " --cost");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_TRUE(contains(bad.err, "qbc plan")) << bad.err;
}

// Issue 28, point 6: every predicted figure is labelled an estimate, a scheme is
// recommended with the reason, the text table says what the JSON says for multi (1 core x 4
// instances), and the sweep's TTFT column names its prompt length.
TEST(PlanCli, EstimatesAreLabelledAndASchemeIsRecommended) {
  QBC_REQUIRE_SHARED(dir, "model-configs/Qwen2.5-0.5B-Instruct");
  const nlohmann::json j = plan_json(shell_quote(dir));
  EXPECT_TRUE(contains(j["estimates"].get<std::string>(), "estimate")) << j["estimates"];
  ASSERT_EQ(j["schemes"].size(), 4u);
  std::string fastest, best_ttft;
  double best_rate = 0, lowest_ttft = 1e30;
  for (const auto& s : j["schemes"]) {
    EXPECT_TRUE(s["estimate"].get<bool>()) << s["scheme"];
    if (s["decode_tok_s"].get<double>() > best_rate) {
      best_rate = s["decode_tok_s"];
      fastest = s["scheme"];
    }
    if (s["ttft_ms"].get<double>() < lowest_ttft) {
      lowest_ttft = s["ttft_ms"];
      best_ttft = s["scheme"];
    }
    if (s["scheme"] == "multi") {
      EXPECT_EQ(s["cores"], 1);
      EXPECT_EQ(s["instances"], 4);
    }
  }
  const auto& rec = j["recommendation"];
  EXPECT_EQ(rec["scheme"], fastest);
  EXPECT_EQ(rec["fastest_decode"], fastest);
  EXPECT_EQ(rec["best_ttft"], best_ttft);
  EXPECT_TRUE(contains(rec["reason"].get<std::string>(), "fastest decode")) << rec["reason"];
  if (fastest != best_ttft) {
    // From break_even_tokens on, the recommended scheme finishes a reply first.
    auto finish = [&](const std::string& name, double n) {
      for (const auto& s : j["schemes"])
        if (s["scheme"] == name)
          return s["ttft_ms"].get<double>() / 1e3 + n / s["decode_tok_s"].get<double>();
      return 0.0;
    };
    const int64_t n = rec["break_even_tokens"];
    ASSERT_GT(n, 0);
    EXPECT_LE(finish(fastest, n), finish(best_ttft, n));
    EXPECT_GT(finish(fastest, n - 1), finish(best_ttft, n - 1));
    EXPECT_TRUE(contains(rec["reason"].get<std::string>(), best_ttft)) << rec["reason"];
  }
  // The text says the same.
  const auto t = run_qbc("plan " + shell_quote(dir));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_TRUE(contains(t.out, "estimates (")) << t.out;
  EXPECT_TRUE(contains(t.out, "recommended: " + fastest + ": the fastest decode")) << t.out;
  const size_t multi = t.out.find("\nmulti ");
  ASSERT_NE(multi, std::string::npos) << t.out;
  EXPECT_TRUE(contains(t.out.substr(multi, t.out.find('\n', multi + 1) - multi), "1 x 4")) << t.out;
  // The sweep's TTFT column names its prompt length, and follows --prompt-tokens.
  const auto sw = run_qbc("plan " + shell_quote(dir) + " --sweep context");
  ASSERT_EQ(sw.exit_code, 0) << sw.err;
  EXPECT_TRUE(contains(sw.out, "TTFT@240 ms")) << sw.out;
  EXPECT_TRUE(contains(sw.out, "estimates")) << sw.out;
  const auto sj =
      run_qbc("plan " + shell_quote(dir) + " --sweep context --prompt-tokens 100 --json");
  ASSERT_EQ(sj.exit_code, 0) << sj.err;
  const auto rows = nlohmann::json::parse(sj.out);
  ASSERT_EQ(rows.size(), 6u);
  for (const auto& row : rows) {
    EXPECT_EQ(row["prompt_tokens"], 100);
    EXPECT_TRUE(row["estimate"].get<bool>());
    // Qwen2.5-0.5B was trained for 32768 positions: the longer rows say so.
    EXPECT_EQ(row["past_training"].get<bool>(), row["context"].get<int64_t>() > 32768);
  }
  EXPECT_TRUE(contains(sw.out, "65536*")) << sw.out;
}

TEST(PlanCli, BadInputsAreLocatedErrors) {
  const auto none = run_qbc("plan " + shell_quote(temp_dir() / "no-such-model"));
  EXPECT_EQ(none.exit_code, 2) << none.err;
  EXPECT_TRUE(contains(none.err, "no-such-model")) << none.err;
  const auto both = run_qbc("plan a --model-config b");
  EXPECT_EQ(both.exit_code, 2) << both.err;
  const auto help = run_qbc("plan --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(contains(help.out, "config.json")) << help.out;
}

// The published configs of the architectures added for issue 25 (SmolLM3 in ../shared, the
// others stored with the tests): `qbc plan` answers from config.json alone, and the KV cache it
// plans holds K and V of every layer (8-bit): context x layers x kv heads x 2 rows of head_dim
// bytes, each padded to aries-rb's 64-byte DMA alignment (EXAONE 3.5's head_dim 80 -> 128).
TEST(PlanCli, NewArchitecturesRealConfigsAnswer) {
  QBC_REQUIRE_SHARED(smollm3, "model-configs-new/SmolLM3-3B");
  const fs::path assets = testing::source_dir() / "tests/assets/model-configs";
  struct Case {
    fs::path dir;
    int64_t layers, kv_heads, head_dim;
  };
  const Case cases[] = {{smollm3, 36, 4, 128},
                        {assets / "Phi-4-mini-instruct", 32, 8, 128},
                        {assets / "EXAONE-3.5-2.4B-Instruct", 30, 8, 80},
                        {assets / "HyperCLOVAX-SEED-Think-14B", 38, 8, 128},
                        {assets / "c4ai-command-r7b-12-2024", 32, 8, 128}};
  for (const Case& c : cases) {
    const nlohmann::json j =
        plan_json(shell_quote(c.dir) + " --context 4096 --kv-bits 8 --inference-scheme single");
    EXPECT_TRUE(j["fits"].get<bool>()) << c.dir;
    EXPECT_EQ(j["memory"]["dram"]["kv_bytes"].get<int64_t>(),
              4096 * c.layers * c.kv_heads * ((c.head_dim + 63) / 64 * 64) * 2)
        << c.dir;
    EXPECT_GT(j["schemes"][0]["decode_tok_s"].get<double>(), 0.0) << c.dir;
  }
  // EXAONE 4.0 32B: 32B parameters do not fit the device at W8; plan says so (exit 4) and
  // names the memory, rather than failing to read the config.
  const auto r = run_qbc("plan " + shell_quote(assets / "EXAONE-4.0-32B") +
                         " --context 4096 --inference-scheme single --json");
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 4) << r.exit_code << r.err;
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out << r.err;
  EXPECT_GT(j["memory"]["dram"]["weights_bytes"].get<int64_t>(), int64_t{28} << 30);  // 29.4 GiB
}

// Mixture-of-experts configs users bring exit 3 naming the architecture as planned.
TEST(PlanCli, MoeConfigsExitThreeAsPlanned) {
  const std::pair<const char*, const char*> moe[] = {{"Qwen3MoeForCausalLM", "qwen3_moe"},
                                                     {"GptOssForCausalLM", "gpt_oss"},
                                                     {"MixtralForCausalLM", "mixtral"}};
  for (const auto& [arch, type] : moe) {
    const fs::path dir = temp_dir() / type;
    fs::create_directories(dir);
    testing::write_file(dir / "config.json",
                        std::string(R"({"architectures": [")") + arch + R"("], "model_type": ")" +
                            type + R"(", "hidden_size": 2048, "intermediate_size": 6144,
                            "num_hidden_layers": 48, "num_attention_heads": 32,
                            "num_key_value_heads": 4, "vocab_size": 151936,
                            "num_experts": 128, "num_experts_per_tok": 8})");
    const auto r = run_qbc("plan " + shell_quote(dir));
    EXPECT_EQ(r.exit_code, 3) << arch << ": " << r.err;
    EXPECT_TRUE(contains(r.err, arch)) << r.err;
    EXPECT_TRUE(contains(r.err, "not yet supported")) << r.err;
    EXPECT_TRUE(contains(r.err, "planned")) << r.err;
  }
}

// The host embedding (not DRAM): Llama-3.2-1B's tied bf16 table is rows x hidden x 2 bytes,
// and bit.embedding 8 holds rows x (hidden int8 codes + one fp32 scale), rows and hidden read
// from config.json here, not from plan.
TEST(PlanCli, HostEmbeddingBytesFollowTheTableFormula) {
  QBC_REQUIRE_SHARED(dir, "model-configs/Llama-3.2-1B-Instruct");
  std::ifstream in(dir / "config.json");
  const nlohmann::json cfg = nlohmann::json::parse(in);
  const int64_t rows = cfg["vocab_size"].get<int64_t>(), hidden = cfg["hidden_size"].get<int64_t>();
  ASSERT_EQ(cfg["torch_dtype"], "bfloat16");
  const std::string base = shell_quote(dir) + " --inference-scheme single";
  const nlohmann::json f = plan_json(base)["memory"]["host_embedding"];
  const nlohmann::json q = plan_json(base + " --set bit.embedding=8")["memory"]["host_embedding"];
  EXPECT_EQ(f["rows"].get<int64_t>(), rows);
  EXPECT_EQ(f["hidden"].get<int64_t>(), hidden);
  EXPECT_EQ(f["dtype"], "bf16");
  EXPECT_EQ(f["bytes"].get<int64_t>(), rows * hidden * 2);
  EXPECT_EQ(q["bytes"].get<int64_t>(), rows * (hidden + 4));
  EXPECT_EQ(q["float_bytes"].get<int64_t>(), f["bytes"].get<int64_t>());
  EXPECT_EQ(f["i8_saves_bytes"].get<int64_t>(), rows * hidden * 2 - rows * (hidden + 4));
  // The text report names the host table too.
  const auto text = run_qbc("plan " + base + " --set bit.embedding=8");
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_TRUE(contains(text.out, "host embedding")) << text.out;
}

}  // namespace
}  // namespace qbc
