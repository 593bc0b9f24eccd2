// End-to-end tests of `qbc random-model`: the written folder loads back, seeds are
// deterministic, a real config can be shrunk, and bad input exits 2 naming the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "qbc/frontend/hparams.h"
#include "qbc/frontend/random_model.h"
#include "qbc/frontend/safetensors.h"
#include "qbc/tensorfile/dtype.h"
#include "qbc/tokenizer/tokenizer.h"
#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::read_file;
using ::qbc::testing::run_qbc;
using ::qbc::testing::shell_quote;
using ::qbc::testing::temp_dir;
using ::qbc::testing::write_file;

TEST(RandomModelCli, HelpExplainsEveryOption) {
  auto r = run_qbc("random-model --help");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* opt :
       {"--tiny", "--output", "--dtype", "--seed", "--layers", "--hidden", "--intermediate",
        "--vocab", "--heads", "--kv-heads", "--head-dim", "--force", "f32 | f16 | bf16"}) {
    EXPECT_TRUE(contains(r.out, opt)) << opt;
  }
  EXPECT_TRUE(contains(run_qbc("--help").out, "random-model"));
}

TEST(RandomModelCli, WritesReadableTinyModel) {
  const fs::path dir = temp_dir() / "tiny";
  auto r = run_qbc("-v random-model --tiny -o " + shell_quote(dir));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "21 tensors")) << r.out;
  EXPECT_TRUE(contains(r.err, "21/21")) << r.err;  // progress
  EXPECT_TRUE(contains(r.err, "bytes")) << r.err;  // final summary with size and time

  StatusOr<frontend::HParams> hp = frontend::load_hparams(dir / "config.json");
  QBC_ASSERT_OK(hp);
  EXPECT_EQ(hp->num_hidden_layers, 2);
  EXPECT_EQ(hp->hidden_size, 64);
  EXPECT_EQ(hp->torch_dtype, "float32");
  StatusOr<frontend::SafetensorsCheckpoint> ckpt = frontend::SafetensorsCheckpoint::open(dir);
  QBC_ASSERT_OK(ckpt);
  const std::vector<frontend::HfTensorSpec> specs = frontend::hf_tensor_specs(*hp);
  ASSERT_EQ(ckpt->tensors().size(), specs.size());
  for (const frontend::HfTensorSpec& s : specs) {
    const frontend::SafetensorsTensor* t = ckpt->find(s.name);
    ASSERT_NE(t, nullptr) << s.name;
    EXPECT_EQ(t->shape, s.shape) << s.name;
    EXPECT_EQ(t->dtype, tensorfile::DType::kF32) << s.name;
  }
  std::vector<float> v;
  QBC_ASSERT_OK(ckpt->read_f32("model.norm.weight", &v));
  for (float x : v) EXPECT_NEAR(x, 1.0f, 0.1f);
  for (const auto& entry : fs::directory_iterator(dir)) {  // No temporary files left behind.
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name == "config.json" || name == "model.safetensors" || name == "tokenizer.json")
        << name;
  }
  // The byte-level tokenizer beside it (vocab 256: the bytes at their ids, except 1 and 2,
  // which are the config's BOS and EOS): text round-trips.
  auto tok = tokenizer::Tokenizer::from_hf_dir(dir);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  const std::string text = "Once upon a time, \xc3\xa9t\xc3\xa9!";
  const std::vector<int32_t> ids = tok->encode(text, false);
  EXPECT_EQ(ids.size(), text.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], static_cast<uint8_t>(text[i])) << i;
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
}

// A Qwen3-0.6B-shaped random model (its 151,936-id vocabulary, BOS 151643, EOS 151645):
// every id of the vocabulary decodes to text, words beyond the bytes are visible ASCII, the
// special tokens sit at the config's ids, text round-trips, and `qbc run` of the MXQ compiled
// from it prints text after the prompt (before, ids >= 256 decoded to "").
TEST(RandomModelCli, TokenizerCoversTheVocabularyAndRunPrintsText) {
  QBC_REQUIRE_SHARED(config, "model-configs/Qwen3-0.6B/config.json");
  const fs::path dir = temp_dir();
  auto r = run_qbc("random-model " + shell_quote(config) +
                   " --layers 2 --hidden 64 --intermediate 128 --heads 4 --kv-heads 2"
                   " --head-dim 16 -o " +
                   shell_quote(dir / "qwen3"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto tok = tokenizer::Tokenizer::from_hf_dir(dir / "qwen3");
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  ASSERT_EQ(tok->vocab_size(), 151936);
  EXPECT_EQ(tok->bos_id(), 151643);
  EXPECT_EQ(tok->eos_id(), 151645);
  EXPECT_EQ(tok->token_type(151643), tokenizer::TokenType::kControl);
  EXPECT_EQ(tok->token_type(151645), tokenizer::TokenType::kControl);
  int64_t words = 0;
  for (int32_t id = 0; id < tok->vocab_size(); ++id) {
    const std::string piece = tok->decode({id}, /*skip_special=*/false);
    ASSERT_FALSE(piece.empty()) << "id " << id;
    if (id < 256 || tok->token_type(id) == tokenizer::TokenType::kControl) continue;
    ++words;
    for (char c : piece)
      ASSERT_TRUE(c == ' ' || (c >= 'a' && c <= 'z')) << "id " << id << ": " << piece;
  }
  EXPECT_EQ(words, 151936 - 256 - 2);
  const std::string text = "Once upon a time, kabe mitu \xc3\xa9t\xc3\xa9!";
  EXPECT_EQ(tok->decode(tok->encode(text, false)), text);
  EXPECT_LT(tok->encode(" kabe", false).size(), 2u);  // a pseudo-word is one token

  const fs::path mxq = dir / "q.mxq";
  r = run_qbc("compile " + shell_quote(dir / "qwen3") +
              " --preset llm_fast --use-random-calib --set calibration.numSamples=2"
              " --set calibration.seqLength=32 --set llm.attributes.maxSequenceLength=64"
              " --set llm.attributes.maxCacheLength=64 -o " +
              shell_quote(mxq));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_qbc("run " + shell_quote(mxq) + " -p Hello -n 8 --ignore-eos --ids");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string line = r.out.substr(0, r.out.find('\n'));
  EXPECT_EQ(line.rfind("Hello", 0), 0u) << r.out;
  EXPECT_GT(line.size(), std::string("Hello").size() + 8) << r.out;  // 8 tokens, 2+ bytes each
}

TEST(RandomModelCli, SameSeedGivesIdenticalBytes) {
  const fs::path root = temp_dir();
  for (const char* name : {"a", "b"}) {
    auto r = run_qbc("random-model --tiny --dtype bf16 --seed 7 -o " + shell_quote(root / name));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  ASSERT_EQ(
      run_qbc("random-model --tiny --dtype bf16 --seed 8 -o " + shell_quote(root / "c")).exit_code,
      0);
  const std::string a = read_file(root / "a" / "model.safetensors");
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, read_file(root / "b" / "model.safetensors"));
  EXPECT_EQ(read_file(root / "a" / "config.json"), read_file(root / "b" / "config.json"));
  const std::string c = read_file(root / "c" / "model.safetensors");
  EXPECT_EQ(a.size(), c.size());
  EXPECT_NE(a, c);
  EXPECT_TRUE(contains(read_file(root / "a" / "config.json"), "\"bfloat16\""));
}

TEST(RandomModelCli, ShrinksLlama32Config) {
  QBC_REQUIRE_SHARED(config, "model-configs/Llama-3.2-1B-Instruct/config.json");
  const fs::path dir = temp_dir() / "llama";
  auto r = run_qbc("random-model " + shell_quote(config) + " -o " + shell_quote(dir) +
                   " --layers 2 --hidden 128 --intermediate 256 --vocab 512 --heads 4"
                   " --kv-heads 2 --head-dim 32 --seed 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  StatusOr<frontend::HParams> hp = frontend::load_hparams(dir / "config.json");
  QBC_ASSERT_OK(hp);
  EXPECT_EQ(hp->architecture, "LlamaForCausalLM");
  EXPECT_EQ(hp->num_hidden_layers, 2);
  EXPECT_EQ(hp->hidden_size, 128);
  EXPECT_EQ(hp->intermediate_size, 256);
  EXPECT_EQ(hp->vocab_size, 512);
  EXPECT_EQ(hp->num_attention_heads, 4);
  EXPECT_EQ(hp->num_key_value_heads, 2);
  EXPECT_EQ(hp->head_dim, 32);
  EXPECT_EQ(hp->torch_dtype, "bfloat16");  // The default dtype follows the source config.
  StatusOr<frontend::SafetensorsCheckpoint> ckpt = frontend::SafetensorsCheckpoint::open(dir);
  QBC_ASSERT_OK(ckpt);
  EXPECT_EQ(ckpt->tensors().size(), frontend::hf_tensor_specs(*hp).size());
  EXPECT_EQ(ckpt->find("lm_head.weight"), nullptr);  // Llama 3.2 ties its embeddings.
  const frontend::SafetensorsTensor* k = ckpt->find("model.layers.1.self_attn.k_proj.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->dtype, tensorfile::DType::kBF16);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{64, 128}));
  // Keys the overrides do not touch are kept.
  const auto src = nlohmann::json::parse(read_file(config));
  const auto out = nlohmann::json::parse(read_file(dir / "config.json"));
  EXPECT_EQ(out["rope_scaling"], src["rope_scaling"]);
  EXPECT_EQ(out["rope_theta"], src["rope_theta"]);
}

TEST(RandomModelCli, BadInputExits2NamingTheFile) {
  const fs::path root = temp_dir();
  const fs::path missing = root / "missing-config.json";
  auto r = run_qbc("random-model " + shell_quote(missing) + " -o " + shell_quote(root / "out1"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, missing.string())) << r.err;
  EXPECT_FALSE(fs::exists(root / "out1"));

  const fs::path bad = root / "bad-config.json";
  write_file(bad, "{\"architectures\": [\"LlamaForCausalLM\"], ");
  r = run_qbc("random-model " + shell_quote(bad) + " -o " + shell_quote(root / "out2"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, bad.string())) << r.err;

  // Inconsistent overrides are bad input too: 3 heads are not a multiple of 2 kv heads.
  r = run_qbc("random-model --tiny --heads 3 -o " + shell_quote(root / "out3"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "num_key_value_heads")) << r.err;

  // A non-empty output folder needs --force, and is then overwritten in place.
  const fs::path full = root / "full";
  write_file(full / "notes.txt", "keep me");
  r = run_qbc("random-model --tiny -o " + shell_quote(full));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, full.string())) << r.err;
  EXPECT_TRUE(contains(r.err, "--force")) << r.err;
  EXPECT_FALSE(fs::exists(full / "model.safetensors"));
  r = run_qbc("random-model --tiny --force -o " + shell_quote(full));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(full / "model.safetensors"));
  EXPECT_EQ(read_file(full / "notes.txt"), "keep me");

  // The output path is a file.
  r = run_qbc("random-model --tiny -o " + shell_quote(full / "notes.txt"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(contains(r.err, "not a folder")) << r.err;

  // Neither or both of CONFIG.json and --tiny; an unknown dtype.
  EXPECT_EQ(run_qbc("random-model -o " + shell_quote(root / "out4")).exit_code, 2);
  EXPECT_EQ(run_qbc("random-model --tiny " + shell_quote(bad) + " -o " + shell_quote(root / "out4"))
                .exit_code,
            2);
  EXPECT_EQ(run_qbc("random-model --tiny --dtype i8 -o " + shell_quote(root / "out4")).exit_code,
            2);
  EXPECT_EQ(run_qbc("random-model --tiny --layers 0 -o " + shell_quote(root / "out4")).exit_code,
            2);
  EXPECT_FALSE(fs::exists(root / "out4"));
}

TEST(RandomModelCli, UnsupportedArchitectureExits3) {
  const fs::path root = temp_dir();
  const fs::path config = root / "config.json";
  write_file(config, R"({"architectures": ["MambaForCausalLM"], "hidden_size": 64})");
  auto r = run_qbc("random-model " + shell_quote(config) + " -o " + shell_quote(root / "out"));
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_TRUE(contains(r.err, "MambaForCausalLM")) << r.err;
  EXPECT_FALSE(fs::exists(root / "out"));
}

TEST(RandomModelCli, JsonEventsReportProgressAndResult) {
  const fs::path dir = temp_dir() / "json";
  auto r = run_qbc("--log-format json random-model --tiny -o " + shell_quote(dir));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  bool saw_progress = false, saw_result = false;
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(j.is_object()) << line;
    if (j["event"] == "progress") saw_progress = true;
    if (j["event"] == "result") {
      saw_result = true;
      EXPECT_EQ(j["result"]["tensors"], 21);
      EXPECT_GT(j["result"]["bytes"].get<int64_t>(), 400000);
    }
  }
  EXPECT_TRUE(saw_progress) << r.err;
  EXPECT_TRUE(saw_result) << r.err;
}

}  // namespace
}  // namespace qbc
