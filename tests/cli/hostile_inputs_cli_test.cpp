// Hostile inputs through the CLI: absurd counts in config.json and GGUF metadata, numeric literals
// that overflow in a JSON compile config, huge string values and protobuf junk as MBLT. Each is a
// located exit 2 at once, never exit 70, an echo of the whole value or libprotobuf's own log.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::read_file;
using testing::run_qbc;
using testing::shell_quote;
using testing::temp_dir;
using testing::write_file;

// Runs `qbc <args>` and returns the result with the wall time in seconds.
testing::RunResult timed(const std::string& args, double* seconds) {
  const auto start = std::chrono::steady_clock::now();
  testing::RunResult r = run_qbc(args);
  *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

// `qbc parse MODEL -o <temp>/out.mblt`: the command that reads a model.
std::string parse_args(const fs::path& model) {
  return "parse " + shell_quote(model) + " -o " + shell_quote(temp_dir() / "out.mblt");
}

// A copy of stories260K's HF folder whose config.json has `key` replaced by `value` (raw JSON).
fs::path hf_with(const fs::path& hf, const std::string& key, const std::string& value) {
  std::string config = read_file(hf / "config.json");
  const size_t k = config.find("\"" + key + "\"");
  EXPECT_NE(k, std::string::npos) << key;
  const size_t colon = config.find(':', k);
  const size_t end = config.find_first_of(",}", colon);
  config = config.substr(0, colon + 1) + " " + value + config.substr(end);
  const fs::path dir = temp_dir() / "hf";
  fs::create_directories(dir);
  write_file(dir / "config.json", config);
  fs::create_symlink(hf / "model.safetensors", dir / "model.safetensors");
  return dir;
}

// stories260K.gguf with the u32 value of `key` (a uint32 metadata key) set to `value`.
fs::path gguf_with_u32(const fs::path& gguf, const std::string& key, uint32_t value) {
  std::string bytes = read_file(gguf);
  const size_t k = bytes.find(key);
  EXPECT_NE(k, std::string::npos) << key;
  uint32_t type = 0;
  std::memcpy(&type, bytes.data() + k + key.size(), 4);
  EXPECT_EQ(type, 4u) << key << " is not uint32";
  std::memcpy(bytes.data() + k + key.size() + 4, &value, 4);
  const fs::path out = temp_dir() / "patched.gguf";
  write_file(out, bytes);
  return out;
}

TEST(HostileInputsCliTest, ConfigJsonLayerCountOf2To31IsExit2NamingTheKey) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const fs::path dir = hf_with(hf, "num_hidden_layers", "2147483648");
  double s = 0;
  const auto r = timed(parse_args(dir), &s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "config.json: key 'num_hidden_layers'")) << r.err;
  EXPECT_TRUE(contains(r.err, "2147483648 exceeds qbc's limit of 1024")) << r.err;
  EXPECT_LT(s, 5.0);
}

TEST(HostileInputsCliTest, ConfigJsonHugeSizesAreExit2) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  for (const auto& [key, value] :
       {std::pair{"vocab_size", "4294967296"}, std::pair{"hidden_size", "9223372036854775807"},
        std::pair{"num_attention_heads", "1e300"}}) {
    const fs::path dir = hf_with(hf, key, value);
    const auto r = run_qbc(parse_args(dir));
    EXPECT_EQ(r.exit_code, 2) << key << ": " << r.err;
    EXPECT_TRUE(contains(r.err, std::string("key '") + key + "'")) << r.err;
  }
}

// The readers of the families with their own keys: EXAONE 3.5's num_layers, SmolLM3's
// per-layer no_rope_layers, EXAONE 4.0's sliding_window_pattern, Cohere2's logit_scale,
// sliding_window_pattern and head_dim, HyperCLOVAX's multipliers. `qbc plan` reads config.json
// alone; each is a located exit 2 at once.
TEST(HostileInputsCliTest, NewFamilyConfigKeysAreLocatedExit2) {
  std::string million = "[1";
  for (int i = 1; i < 1000000; ++i) million += ",1";
  million += "]";
  const std::pair<std::string, std::string> cases[] = {
      {R"("architectures": ["ExaoneForCausalLM"], "num_layers": 2147483648)", "'num_layers'"},
      {R"("architectures": ["SmolLM3ForCausalLM"], "num_hidden_layers": 2, "no_rope_layers": )" +
           million,
       "'no_rope_layers'"},
      {R"("architectures": ["Exaone4ForCausalLM"], "num_hidden_layers": 2, "sliding_window": 8,
          "sliding_window_pattern": ")" +
           std::string(1 << 20, 'Q') + R"(")",
       "'sliding_window_pattern'"},
      {R"("architectures": ["Cohere2ForCausalLM"], "num_hidden_layers": 2, "logit_scale": -1e308)",
       "'logit_scale'"},
      {R"("architectures": ["Cohere2ForCausalLM"], "num_hidden_layers": 2,
          "sliding_window_pattern": 9223372036854775807000)",
       "'sliding_window_pattern'"},
      {R"("architectures": ["Cohere2ForCausalLM"], "num_hidden_layers": 2, "head_dim": 4096)",
       "'head_dim'"},
      {R"("architectures": ["HyperCLOVAXForCausalLM"], "num_hidden_layers": 2,
          "residual_multiplier": -0.5)",
       "'residual_multiplier'"},
      {R"("architectures": ["HyperCLOVAXForCausalLM"], "num_hidden_layers": 2,
          "embedding_multiplier": "x")",
       "'embedding_multiplier'"},
  };
  int n = 0;
  for (const auto& [keys, want] : cases) {
    const fs::path dir = temp_dir() / ("family" + std::to_string(n++));
    fs::create_directories(dir);
    write_file(dir / "config.json",
               R"({"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                   "vocab_size": 256, )" +
                   keys + "}");
    double s = 0;
    const auto r = timed("plan " + shell_quote(dir), &s);
    EXPECT_EQ(r.exit_code, 2) << want << ": " << r.err.substr(0, 300);
    EXPECT_TRUE(contains(r.err, "config.json: key " + want)) << r.err.substr(0, 300);
    EXPECT_LT(r.err.size(), 4096u) << want;
    EXPECT_LT(s, 5.0) << want;
  }
}

TEST(HostileInputsCliTest, GgufBlockCountOf2To32Minus1IsExit2AtOnce) {
  QBC_REQUIRE_SHARED(gguf, "models/stories260k/stories260K.gguf");
  for (uint32_t blocks : {0xFFFFFFFFu, 1000000u}) {
    const fs::path bad = gguf_with_u32(gguf, "llama.block_count", blocks);
    double s = 0;
    const auto r = timed(parse_args(bad), &s);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(contains(r.err, "llama.block_count")) << r.err;
    EXPECT_TRUE(contains(r.err, std::to_string(blocks))) << r.err;
    EXPECT_LT(s, 2.0) << blocks << " blocks";
  }
}

TEST(HostileInputsCliTest, GgufClaimingAMillionTensorsOrKeysIsExit2AtOnce) {
  QBC_REQUIRE_SHARED(gguf, "models/stories260k/stories260K.gguf");
  // Header: magic, version (u32 each), tensor count, key/value count (u64 each).
  for (const auto& [offset, what] :
       {std::pair{8, "tensor count"}, std::pair{16, "key/value count"}}) {
    std::string bytes = read_file(gguf);
    const uint64_t million = 1000000;
    std::memcpy(bytes.data() + offset, &million, 8);
    const fs::path bad = temp_dir() / "million.gguf";
    write_file(bad, bytes);
    double s = 0;
    const auto r = timed(parse_args(bad), &s);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(contains(r.err, std::string(what) + " 1000000 cannot fit")) << r.err;
    EXPECT_LT(s, 2.0);
  }
}

TEST(HostileInputsCliTest, OverflowingLiteralInJsonConfigIsALocatedExit2) {
  const fs::path dir = temp_dir();
  const fs::path big = dir / "big.json";
  write_file(big, "{\"quantization\": {\"weightBits\": 1e999999}}");
  auto r = run_qbc("dump-config -c " + shell_quote(big));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "big.json:1:")) << r.err;
  EXPECT_TRUE(contains(r.err, "quantization.weightBits")) << r.err;
  EXPECT_TRUE(contains(r.err, "number overflow")) << r.err;
  EXPECT_FALSE(contains(r.err, "internal error")) << r.err;

  const fs::path digits = dir / "digits.json";
  write_file(digits, "{\"seed\": 123456789012345678901234567890}");
  r = run_qbc("dump-config -c " + shell_quote(digits));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "digits.json:1:")) << r.err;
  EXPECT_TRUE(contains(r.err, "seed: expected")) << r.err;

  const fs::path neg = dir / "neg.json";
  write_file(neg, "{\"quantization\": {\"weightBits\": -1e999999}}");
  r = run_qbc("dump-config -c " + shell_quote(neg));
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

TEST(HostileInputsCliTest, OverflowingLiteralInConfigJsonIsALocatedExit2) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const fs::path dir = hf_with(hf, "rms_norm_eps", "1e999999");
  const auto r = run_qbc(parse_args(dir));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "config.json:")) << r.err;
  EXPECT_TRUE(contains(r.err, "rms_norm_eps")) << r.err;
}

TEST(HostileInputsCliTest, A20MbStringIsQuotedByAShortPrefix) {
  const std::string huge(20 << 20, 'x');
  const fs::path dir = temp_dir();
  const fs::path cfg = dir / "c.json";
  write_file(cfg, "{\"seed\": \"" + huge + "\"}");
  auto r = run_qbc("dump-config -c " + shell_quote(cfg));
  EXPECT_EQ(r.exit_code, 2) << r.err.substr(0, 300);
  EXPECT_LT(r.err.size(), 300u) << r.err.substr(0, 300);
  EXPECT_TRUE(contains(r.err, "(20971520 bytes)")) << r.err.substr(0, 300);

  const fs::path yaml = dir / "c.yaml";
  write_file(yaml, "llm:\n  " + huge + ": 8\n");
  r = run_qbc("dump-config -c " + shell_quote(yaml));
  EXPECT_EQ(r.exit_code, 2) << r.err.substr(0, 300);
  EXPECT_LT(r.err.size(), 300u) << r.err.substr(0, 300);

  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const fs::path model = hf_with(hf, "architectures", "[\"" + huge + "\"]");
  r = run_qbc(parse_args(model));
  EXPECT_EQ(r.exit_code, 3) << r.err.substr(0, 300);  // an unsupported architecture
  // The quoted name is a short prefix: the message up to the list of supported architectures
  // stays under the other two cases' bound. The list grows by one short name per family.
  const size_t list = r.err.find("(supported: ");
  ASSERT_NE(list, std::string::npos) << r.err.substr(0, 500);
  EXPECT_LT(list, 300u) << r.err.substr(0, 500);
  EXPECT_LT(r.err.size() - list, 64u * 16u) << r.err.substr(0, 500);
  EXPECT_TRUE(contains(r.err, "(20971520 bytes) is not supported")) << r.err.substr(0, 500);
}

TEST(HostileInputsCliTest, ProtobufJunkMbltLeavesNoLibprotobufLines) {
  const fs::path dir = temp_dir();
  // Model.graph_name (field 3, length-delimited) holding bytes that are not UTF-8: libprotobuf
  // logs an ERROR line for it before failing the parse.
  const fs::path junk = dir / "junk.mblt";
  write_file(junk, std::string("\x08\x01\x1a\x04\xff\xfe\xfd\xfc", 8));
  auto r = run_qbc("inspect " + shell_quote(junk));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "junk.mblt")) << r.err;
  EXPECT_FALSE(contains(r.err, "[libprotobuf")) << r.err;
  EXPECT_FALSE(contains(r.err, "libprotobuf")) << r.err;

  const fs::path random_bytes = dir / "random.mblt";
  write_file(random_bytes, std::string("\xff\xff\xff\xff\x0f\x22\x07garbage", 14));
  r = run_qbc("inspect " + shell_quote(random_bytes));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_FALSE(contains(r.err, "libprotobuf")) << r.err;
}

}  // namespace
}  // namespace qbc
