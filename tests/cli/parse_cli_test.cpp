// qbc parse / inspect end to end, and the corrupted-input suite: every broken
// model exits 2 (or 3 when unsupported) with a message naming what is wrong,
// and leaves no output file. Runs under AddressSanitizer in CI (tools/test.sh).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::read_file;
using ::qbc::testing::run_qbc;
using ::qbc::testing::shell_quote;
using ::qbc::testing::temp_dir;
using ::qbc::testing::write_file;

// A fresh tiny random model folder.
fs::path tiny_model() {
  const fs::path dir = temp_dir() / "model";
  auto r = run_qbc("random-model --tiny -o " + shell_quote(dir));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return dir;
}

struct Broken {
  int exit_code;
  std::vector<std::string> message_parts;
};

void expect_parse_fails(const fs::path& model, const Broken& b) {
  const fs::path out = temp_dir() / "out.mblt";
  auto r = run_qbc("parse " + shell_quote(model) + " -o " + shell_quote(out));
  EXPECT_EQ(r.exit_code, b.exit_code) << r.err;
  for (const std::string& part : b.message_parts) {
    EXPECT_NE(r.err.find(part), std::string::npos) << "stderr lacks '" << part << "': " << r.err;
  }
  EXPECT_FALSE(fs::exists(out)) << "partial output left behind";
  EXPECT_TRUE(fs::is_empty(out.parent_path()));
}

TEST(ParseCli, ParsesAndInspectsStories260k) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const fs::path out = temp_dir() / "s.mblt";
  auto r = run_qbc("parse " + shell_quote(hf) + " -o " + shell_quote(out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto i = run_qbc("inspect --json " + shell_quote(out));
  ASSERT_EQ(i.exit_code, 0) << i.err;
  auto j = nlohmann::json::parse(i.out);
  EXPECT_EQ(j["architecture"], "LlamaForCausalLM");
  EXPECT_EQ(j["blocks"], 5);
  EXPECT_EQ(j["source"]["format"], "hf-safetensors");
  EXPECT_EQ(j["outputs"][0]["type"], "f32[?,?,512]");
  bool hashed = false;
  for (const auto& f : j["source"]["files"]) hashed = hashed || f["xxh3_128"].get<std::string>().size() == 32;
  EXPECT_TRUE(hashed);
  auto g = run_qbc("inspect --graph " + shell_quote(out));
  EXPECT_NE(g.out.find("%blk.4.ffn.down_proj = linear("), std::string::npos);
  // Parsing is deterministic: same input, same bytes.
  const fs::path out2 = temp_dir() / "s2.mblt";
  ASSERT_EQ(run_qbc("parse " + shell_quote(hf) + " -o " + shell_quote(out2)).exit_code, 0);
  EXPECT_EQ(read_file(out), read_file(out2));
}

TEST(ParseCli, GgufAndTiedModels) {
  QBC_REQUIRE_SHARED(gguf, "models/stories260k/stories260K.gguf");
  QBC_REQUIRE_SHARED(tied, "models/stories260k/hf-tied");
  auto inspect = [](const fs::path& m) {
    const fs::path out = temp_dir() / "m.mblt";
    auto r = run_qbc("parse " + shell_quote(m) + " -o " + shell_quote(out));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(run_qbc("inspect --json " + shell_quote(out)).out);
  };
  auto g = inspect(gguf);
  EXPECT_EQ(g["source"]["format"], "gguf");
  EXPECT_EQ(g["parameters"]["head_tied_to"], "");  // stories260K.gguf carries output.weight
  auto t = inspect(tied);
  EXPECT_EQ(t["parameters"]["head_tied_to"], "model.embed_tokens.weight");
}

TEST(ParseCli, TruncatedSafetensors) {
  const fs::path m = tiny_model();
  const std::string bytes = read_file(m / "model.safetensors");
  write_file(m / "model.safetensors", bytes.substr(0, bytes.size() / 2));
  expect_parse_fails(m, {2, {"model.safetensors"}});
}

TEST(ParseCli, LyingHeaderLength) {
  const fs::path m = tiny_model();
  std::string bytes = read_file(m / "model.safetensors");
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>(0x7f);
  write_file(m / "model.safetensors", bytes);
  expect_parse_fails(m, {2, {"model.safetensors", "header"}});
}

// Rewrites the safetensors header JSON with `edit`, keeping the data.
void edit_header(const fs::path& file, const std::function<void(nlohmann::json&)>& edit) {
  std::string bytes = read_file(file);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  nlohmann::json h = nlohmann::json::parse(bytes.substr(8, n));
  edit(h);
  std::string text = h.dump();
  while ((text.size() + 8) % 8 != 0) text += ' ';
  std::string out(8, '\0');
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((len >> (8 * i)) & 0xff);
  write_file(file, out + text + bytes.substr(8 + n));
}

TEST(ParseCli, OverlappingOffsets) {
  const fs::path m = tiny_model();
  edit_header(m / "model.safetensors", [](nlohmann::json& h) {
    auto& a = h["model.layers.0.mlp.down_proj.weight"]["data_offsets"];
    auto& b = h["model.layers.0.mlp.up_proj.weight"]["data_offsets"];
    b = a;
  });
  expect_parse_fails(m, {2, {"model.safetensors", "overlap"}});
}

TEST(ParseCli, ShapeDoesNotMatchBytes) {
  const fs::path m = tiny_model();
  edit_header(m / "model.safetensors", [](nlohmann::json& h) {
    h["model.norm.weight"]["shape"] = {65};
  });
  expect_parse_fails(m, {2, {"model.safetensors", "model.norm.weight"}});
}

TEST(ParseCli, MissingTensor) {
  const fs::path m = tiny_model();
  auto cfg = nlohmann::json::parse(read_file(m / "config.json"));
  cfg["num_hidden_layers"] = 3;  // the file holds 2 layers
  write_file(m / "config.json", cfg.dump(2));
  expect_parse_fails(m, {2, {"model.layers.2."}});
}

TEST(ParseCli, WrongShapeForArchitecture) {
  const fs::path m = tiny_model();
  auto cfg = nlohmann::json::parse(read_file(m / "config.json"));
  cfg["intermediate_size"] = cfg["intermediate_size"].get<int>() * 2;
  write_file(m / "config.json", cfg.dump(2));
  expect_parse_fails(m, {2, {"mlp"}});
}

TEST(ParseCli, GarbageConfigJson) {
  const fs::path m = tiny_model();
  write_file(m / "config.json", "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  oops\n}\n");
  expect_parse_fails(m, {2, {"config.json:3"}});
}

TEST(ParseCli, UnsupportedArchitectureExits3) {
  const fs::path m = tiny_model();
  auto cfg = nlohmann::json::parse(read_file(m / "config.json"));
  cfg["architectures"] = {"GPTNeoXForCausalLM"};  // (MoE architectures have their own message)
  write_file(m / "config.json", cfg.dump(2));
  expect_parse_fails(m, {3, {"GPTNeoXForCausalLM", "LlamaForCausalLM"}});
}

TEST(ParseCli, GarbageBytesAsWeights) {
  const fs::path m = tiny_model();
  std::string junk(4096, '\0');
  uint32_t x = 12345;
  for (char& c : junk) {
    x = x * 1664525u + 1013904223u;
    c = static_cast<char>(x >> 24);
  }
  write_file(m / "model.safetensors", junk);
  expect_parse_fails(m, {2, {"model.safetensors"}});
}

TEST(ParseCli, TruncatedGguf) {
  QBC_REQUIRE_SHARED(gguf, "models/stories260k/stories260K.gguf");
  const fs::path m = temp_dir() / "cut.gguf";
  const std::string bytes = read_file(gguf);
  write_file(m, bytes.substr(0, bytes.size() * 2 / 3));
  expect_parse_fails(m, {2, {"cut.gguf"}});
}

TEST(ParseCli, MissingModelAndBadOutput) {
  expect_parse_fails(temp_dir() / "nope", {2, {"nope"}});
  const fs::path m = tiny_model();
  auto r = run_qbc("parse " + shell_quote(m) + " -o /nonexistent-dir/x.mblt");
  EXPECT_EQ(r.exit_code, 2);
  auto bad_ext = run_qbc("parse " + shell_quote(m) + " -o " + shell_quote(temp_dir() / "x.bin"));
  EXPECT_EQ(bad_ext.exit_code, 2);
  EXPECT_NE(bad_ext.err.find(".mblt"), std::string::npos);
}

TEST(ParseCli, InspectRejectsCorruptMblt) {
  const fs::path f = temp_dir() / "junk.mblt";
  write_file(f, "this is not protobuf \x01\x02\x03\xff");
  auto r = run_qbc("inspect " + shell_quote(f));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("junk.mblt"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace qbc
