// Text that reaches a JSON writer is UTF-8 or refused where it is read, with its location
// (issue 29, "fuzzing to depth" finding 1). One case per reader whose strings end up in JSON:
// compile configs (YAML and JSON files, YAML escapes, --set), config.json, tokenizer.json, the
// safetensors header, GGUF metadata strings (and their one exemption, the vocabulary), the MBLT
// text form; and a seeded round of byte insertions into a compile config, where every layer
// that resolves must also print as JSON and YAML (the path of `qbc dump-config`). The inputs are
// written here byte by byte (the GGUF one by the spec's layout), never by qbc's writers.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/frontend/gguf.h"
#include "qbc/frontend/hparams.h"
#include "qbc/frontend/safetensors.h"
#include "qbc/ir/text.h"
#include "qbc/support/exit_codes.h"
#include "qbc/support/utf8.h"
#include "qbc/tokenizer/tokenizer.h"
#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::temp_dir;
using testing::write_file;

void expect_refused_at(const Status& s, const std::string& where) {
  ASSERT_FALSE(s.ok()) << where;
  EXPECT_EQ(exit_code_for(s), kExitBadInput) << s.to_string();
  EXPECT_TRUE(contains(s.message(), where)) << s.to_string();
  // The message itself stays printable as JSON (it may become a JSON event).
  EXPECT_TRUE(is_valid_utf8(s.message())) << s.to_string();
}

Status resolve_file(const fs::path& p, const std::string& text) {
  write_file(p, text);
  config::LoadRequest req;
  req.files = {p.string()};
  return config::resolve(req).status();
}

TEST(Utf8Readers, CompileConfigYamlRefusesARawByteWithItsLineAndColumn) {
  const std::string p = (temp_dir() / "raw.yaml").string();
  expect_refused_at(resolve_file(p, "seed: 3\ncalibDataPaths: [\"ab\xff\"]\n"),
                    p + ":2:21: the text is not valid UTF-8 (byte 0xFF)");
  // A plain scalar and a key, too.
  expect_refused_at(resolve_file(p, "calibDataPaths: [a\xc3]\n"), p + ":1:19:");
  expect_refused_at(resolve_file(p, "se\xe9d: 3\n"), p + ":1:3:");
}

TEST(Utf8Readers, CompileConfigYamlEscapesThatAreNotUtf8AreRefused) {
  // "\ud800" is an escape for a lone surrogate: text that is ASCII, a value that is not UTF-8.
  const std::string p = (temp_dir() / "esc.yaml").string();
  const Status s = resolve_file(p, "calibDataPaths: [\"x\\ud800y\"]\n");
  if (!s.ok()) {
    expect_refused_at(s, p + ":1:");
  } else {
    // yaml-cpp turned it into something valid: then it must print.
    config::LoadRequest req;
    req.files = {p};
    auto r = config::resolve(req);
    QBC_ASSERT_OK(r);
    EXPECT_TRUE(is_valid_utf8(config::to_json(r->options)));
  }
}

TEST(Utf8Readers, CompileConfigJsonAndSetValuesAreChecked) {
  const std::string p = (temp_dir() / "raw.json").string();
  expect_refused_at(resolve_file(p, "{\n  \"calibDataPaths\": [\"a\xff\"]\n}\n"), p + ":2:24:");
  config::LoadRequest req;
  req.sets = {"calibDataPaths=[\"a\xfe\"]"};
  auto r = config::resolve(req);
  expect_refused_at(r.status(), "calibDataPaths[0]: the value is not valid UTF-8 (byte 0xFE");
}

TEST(Utf8Readers, ConfigJsonTokenizerJsonAndSafetensorsHeadersRefuseRawBytes) {
  // config.json
  auto hp = frontend::parse_hparams("{\"architectures\": [\"Llama\xff\"]}", "config.json");
  expect_refused_at(hp.status(), "config.json:1:");
  // tokenizer.json
  auto tok = tokenizer::Tokenizer::from_hf_json_text(
      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\xff\": 0}, \"merges\": []}}", "", "",
      "tokenizer.json");
  expect_refused_at(tok.status(), "tokenizer.json");
  // safetensors: u64 header length, then the JSON header (spec: huggingface/safetensors).
  const std::string header = "{\"__metadata__\": {\"format\": \"pt\xff\"}}";
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  bytes += header;
  const fs::path st = temp_dir() / "raw.safetensors";
  write_file(st, bytes);
  expect_refused_at(frontend::SafetensorsFile::open(st).status(), st.string());
}

// GGUF v3 (spec: ggml/docs/gguf.md): magic, version, tensor count, kv count, then key/values
// of u64-length strings and u32 type ids (8 string, 9 array, 4 uint32).
std::string gguf_str(const std::string& s) {
  std::string out(8, '\0');
  const uint64_t n = s.size();
  std::memcpy(out.data(), &n, 8);
  return out + s;
}
template <typename T>
std::string le(T v) {
  std::string out(sizeof(T), '\0');
  std::memcpy(out.data(), &v, sizeof(T));
  return out;
}
std::string gguf(const std::vector<std::string>& kvs) {
  std::string out = "GGUF" + le<uint32_t>(3) + le<uint64_t>(0) + le<uint64_t>(kvs.size());
  for (const std::string& kv : kvs) out += kv;
  return out;
}
std::string kv_string(const std::string& key, const std::string& value) {
  return gguf_str(key) + le<uint32_t>(8) + gguf_str(value);
}
std::string kv_strings(const std::string& key, const std::vector<std::string>& values) {
  std::string out = gguf_str(key) + le<uint32_t>(9) + le<uint32_t>(8) + le<uint64_t>(values.size());
  for (const std::string& v : values) out += gguf_str(v);
  return out;
}

TEST(Utf8Readers, GgufStringsAreUtf8ExceptTheVocabulary) {
  const fs::path p = temp_dir() / "raw.gguf";
  write_file(
      p, gguf({kv_string("general.architecture", "llama"), kv_string("general.name", "tiny\xff")}));
  auto f = frontend::GgufFile::open(p);
  expect_refused_at(f.status(), "key 'general.name': string value is not valid UTF-8 (byte 0xFF");
  EXPECT_TRUE(contains(f.status().message(), p.string())) << f.status().message();
  // A key, and a string inside another array.
  write_file(p, gguf({kv_string("general.\xc0\xaf", "x")}));
  expect_refused_at(frontend::GgufFile::open(p).status(), "key/value #0: key is not valid UTF-8");
  write_file(p, gguf({kv_strings("general.tags", {"ok", "b\xed\xa0\x80"})}));
  expect_refused_at(frontend::GgufFile::open(p).status(), "element 1");
  // The vocabulary may hold raw bytes (qbc_vocab.json writes them as hex).
  write_file(p, gguf({kv_strings("tokenizer.ggml.tokens", {"a", "\xff\xfe"}),
                      kv_strings("tokenizer.ggml.merges", {"a \xff"})}));
  auto vocab = frontend::GgufFile::open(p);
  QBC_ASSERT_OK(vocab);
  EXPECT_EQ(vocab->find("tokenizer.ggml.tokens")->string_array[1], "\xff\xfe");
}

TEST(Utf8Readers, MbltTextRefusesARawByteWithItsLineAndColumn) {
  auto g = ir::parse_text("graph @g(%x: f32[4]) -> f32[4] {\n  return %x\xff\n}\n", "g.mblt");
  expect_refused_at(g.status(), "g.mblt:2:12: the text is not valid UTF-8 (byte 0xFF)");
}

// Seeded byte insertions into a config: whatever resolves prints as JSON and YAML.
TEST(Utf8Readers, EveryResolvedConfigOfAMutationRoundPrints) {
  const std::string base =
      "seed: 7\ncalibDataPaths: [\"a\", 'b', c]\ntargetProfile: \"test-2core\"\n";
  std::mt19937_64 rng(29);
  const char* const kBytes[] = {
      "\xff",     "\xc3",    "\xe2\x82", "\xed\xa0\x80", "\xf4\x90\x80\x80",
      "\xc0\xaf", "\\ud800", "\\xff",    "\\U0010ffff",  "\\x80"};
  int resolved = 0;
  for (int i = 0; i < 300; ++i) {
    std::string text = base;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e)
      text.insert(rng() % text.size(), kBytes[rng() % (sizeof(kBytes) / sizeof(kBytes[0]))]);
    const fs::path p = temp_dir() / "round.yaml";
    write_file(p, text);
    config::LoadRequest req;
    req.files = {p.string()};
    auto r = config::resolve(req);
    if (!r.ok()) {
      EXPECT_NE(exit_code_for(r.status()), kExitInternal) << r.status().to_string();
      EXPECT_TRUE(is_valid_utf8(r.status().message())) << r.status().to_string();
      continue;
    }
    ++resolved;
    try {
      EXPECT_TRUE(is_valid_utf8(config::to_json(r->options)));
      EXPECT_TRUE(is_valid_utf8(config::to_yaml(r->options)));
    } catch (const std::exception& e) {
      ADD_FAILURE() << "case " << i << ": printing threw " << e.what();
    }
  }
  EXPECT_GT(resolved, 0);  // some escapes ("\x80", "\U0010ffff") are valid and resolve
}

}  // namespace
}  // namespace qbc
