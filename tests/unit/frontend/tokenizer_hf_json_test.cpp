// tokenizer.json parsing: synthetic byte-level (Llama 3 style) and Metaspace vocabularies,
// tokenizer_config.json overrides, and the errors for malformed files.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qbc/frontend/gguf_tokenizer.h"
#include "qbc/tokenizer/tokenizer.h"
#include "test_support.h"

namespace qbc::frontend {
namespace {

using tokenizer::Tokenizer;
using tokenizer::TokenizerKind;
using tokenizer::TokenType;

using Json = nlohmann::json;

const std::string kG = "\xC4\xA0";         // Ġ, GPT-2's space
const std::string kMark = "\xE2\x96\x81";  // ▁, SentencePiece's space

// GPT-2's byte -> unicode alphabet, written out independently of the library.
std::string byte_char(int b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x) {
      if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) ++n;
    }
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

std::filesystem::path write_json(const Json& j, const std::string& name = "tokenizer.json") {
  const auto path = testing::temp_dir() / name;
  testing::write_file(path, j.dump());
  return path;
}

// Llama 3 layout: Split(regex) + ByteLevel(use_regex=false), ignore_merges, template BOS.
Json byte_level_json() {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  vocab["th"] = 256;
  vocab["the"] = 257;
  vocab["\xC4\xA0the"] = 258;  // "Ġthe"
  vocab[kG + "cat"] = 259;     // reachable only through ignore_merges
  const std::string regex = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
                            R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  return Json{
      {"version", "1.0"},
      {"added_tokens",
       Json::array({{{"id", 260}, {"content", "<|begin_of_text|>"}, {"special", true}},
                    {{"id", 261}, {"content", "<|eot_id|>"}, {"special", true}},
                    {{"id", 262}, {"content", "<tool>"}, {"special", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         Json::array(
             {{{"type", "Split"},
               {"pattern", {{"Regex", regex}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}}},
      {"post_processor",
       {{"type", "Sequence"},
        {"processors",
         Json::array(
             {{{"type", "ByteLevel"}},
              {{"type", "TemplateProcessing"},
               {"single", Json::array({{{"SpecialToken", {{"id", "<|begin_of_text|>"}}}},
                                       {{"Sequence", {{"id", "A"}}}}})},
               {"special_tokens",
                {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {260}}}}}}}})}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"ignore_merges", true},
        {"vocab", vocab},
        {"merges", Json::array({"t h", Json::array({"th", "e"}), "\xC4\xA0 the"})}}}};
}

TEST(TokenizerHfJsonTest, ByteLevelLlama3Style) {
  auto tok = Tokenizer::from_hf_json(write_json(byte_level_json()));
  QBC_ASSERT_OK(tok);
  EXPECT_EQ(tok->kind(), TokenizerKind::kByteLevel);
  EXPECT_EQ(tok->vocab_size(), 263);
  EXPECT_EQ(tok->bos_id(), 260);
  EXPECT_TRUE(tok->add_bos_default());
  EXPECT_EQ(tok->encode("the the", true), (std::vector<int32_t>{260, 257, 258}));
  // ignore_merges: " cat" is a token, although no merge builds it.
  EXPECT_EQ(tok->encode(" cat", false), (std::vector<int32_t>{259}));
  // Digits split in groups of three: "12345" -> "123" "45", each byte a token here.
  EXPECT_EQ(tok->encode("12345", false), (std::vector<int32_t>{'1', '2', '3', '4', '5'}));
  // Control tokens only with parse_special; user-defined ones always.
  EXPECT_EQ(tok->encode("<|eot_id|>", false, true), (std::vector<int32_t>{261}));
  EXPECT_GT(tok->encode("<|eot_id|>", false).size(), 1u);
  EXPECT_EQ(tok->encode("a<tool>b", false), (std::vector<int32_t>{'a', 262, 'b'}));
  EXPECT_EQ(tok->decode(tok->encode("the <tool> x", true)), "the <tool> x");
  EXPECT_EQ(tok->decode({260, 257}, /*skip_special=*/false), "<|begin_of_text|>the");
  EXPECT_EQ(tok->token_text(258), "\xC4\xA0the");
  EXPECT_EQ(tok->token_to_piece(258), " the");
}

TEST(TokenizerHfJsonTest, TokenizerConfigOverrides) {
  const auto json = write_json(byte_level_json());
  const auto cfg = write_json({{"add_bos_token", false},
                               {"bos_token", "<|begin_of_text|>"},
                               {"eos_token", {{"content", "<|eot_id|>"}}}},
                              "tokenizer_config.json");
  auto tok = Tokenizer::from_hf_json(json, cfg);
  QBC_ASSERT_OK(tok);
  EXPECT_FALSE(tok->add_bos_default());
  EXPECT_EQ(tok->eos_id(), 261);
  EXPECT_EQ(tok->encode("the"), (std::vector<int32_t>{257}));

  const auto bad_cfg = write_json({{"eos_token", "<nope>"}}, "tokenizer_config.json");
  auto bad = Tokenizer::from_hf_json(json, bad_cfg);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("eos_token"), std::string::npos);
  EXPECT_NE(bad.status().message().find(bad_cfg.string()), std::string::npos);
}

// Llama 2 non-legacy / Mistral layout: Metaspace(prepend_scheme "first", split false).
TEST(TokenizerHfJsonTest, MetaspaceSentencePiece) {
  Json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    vocab[hex] = 3 + b;
  }
  vocab["\xE2\x96\x81"] = 259;  // ▁
  vocab["a"] = 260;
  vocab["b"] = 261;
  vocab[kMark + "a"] = 262;
  vocab[kMark + "b"] = 263;
  const Json j = {
      {"added_tokens", Json::array({{{"id", 0}, {"content", "<unk>"}, {"special", true}},
                                    {{"id", 1}, {"content", "<s>"}, {"special", true}},
                                    {{"id", 2}, {"content", "</s>"}, {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Metaspace"},
        {"replacement", "\xE2\x96\x81"},
        {"prepend_scheme", "first"},
        {"split", false}}},
      {"decoder",
       {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}}},
      {"model",
       {{"type", "BPE"},
        {"byte_fallback", true},
        {"unk_token", "<unk>"},
        {"vocab", vocab},
        {"merges", Json::array({"\xE2\x96\x81 a", "\xE2\x96\x81 b"})}}}};
  auto tok = Tokenizer::from_hf_json(write_json(j));
  QBC_ASSERT_OK(tok);
  EXPECT_EQ(tok->kind(), TokenizerKind::kSentencePiece);
  EXPECT_EQ(tok->encode("a b", false), (std::vector<int32_t>{262, 263}));
  // Metaspace does not add a second "▁" when the text already starts with a space.
  EXPECT_EQ(tok->encode(" a", false), (std::vector<int32_t>{262}));
  // "é" is not in the vocabulary: UTF-8 bytes C3 A9 as byte tokens.
  EXPECT_EQ(tok->encode("aé", false), (std::vector<int32_t>{262, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok->decode(tok->encode("aé b", false)), "aé b");
  // prepend_scheme "first": no "▁" after a special token.
  EXPECT_EQ(tok->encode("</s>a", false, true), (std::vector<int32_t>{2, 260}));
}

StatusOr<Tokenizer> load_text(const std::string& text, std::filesystem::path* path) {
  *path = testing::temp_dir() / "tokenizer.json";
  testing::write_file(*path, text);
  return Tokenizer::from_hf_json(*path);
}

void expect_error(const std::string& text, Code code, const std::string& needle) {
  std::filesystem::path path;
  auto tok = load_text(text, &path);
  ASSERT_FALSE(tok.ok()) << text;
  EXPECT_EQ(tok.status().code(), code) << tok.status().to_string();
  EXPECT_NE(tok.status().message().find(path.string()), std::string::npos)
      << tok.status().to_string();
  EXPECT_NE(tok.status().message().find(needle), std::string::npos) << tok.status().to_string();
}

TEST(TokenizerHfJsonTest, Errors) {
  expect_error("{\"model\": {", Code::kInvalidArgument, "invalid JSON");
  expect_error("[1, 2]", Code::kInvalidArgument, "top level");
  expect_error("{\"version\": \"1.0\"}", Code::kInvalidArgument, "model");
  expect_error(R"({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}})", Code::kUnimplemented,
               "model.type");
  expect_error(R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})", Code::kUnimplemented,
               "WordPiece");
  expect_error(R"({"model": {"type": "BPE", "vocab": {}, "merges": []}})", Code::kInvalidArgument,
               "model.vocab");
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})",
               Code::kInvalidArgument, "merges[0]");
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [7]}})",
               Code::kInvalidArgument, "merges[0]");
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})",
               Code::kInvalidArgument, "model.vocab");
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                   "pre_tokenizer": {"type": "Whitespace"}})",
               Code::kUnimplemented, "pre_tokenizer.type");
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                   "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(("},
                                     "behavior": "Isolated"}})",
               Code::kInvalidArgument, "regex");
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                   "normalizer": {"type": "Lowercase"}})",
               Code::kUnimplemented, "normalizer.type");
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                   "added_tokens": [{"content": "x"}]})",
               Code::kInvalidArgument, "added_tokens[0]");
}

TEST(TokenizerHfJsonTest, IdsAreBoundedByTheEntriesOfTheFile) {
  // An id of 2^31 - 2 would size the token table at ~100 GB: refused at once.
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 2147483646}, "merges": []}})",
               Code::kInvalidArgument, "token id 2147483646 is beyond the 1 vocabulary entries");
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                   "added_tokens": [{"id": 2147483000, "content": "x"}]})",
               Code::kInvalidArgument, "added_tokens[0]: id 2147483000 is beyond");
  expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 1e999999}}}",
               Code::kInvalidArgument, "at key 'model.vocab.a'");
  // A few unused ids are fine (some vocabularies pad their table).
  std::filesystem::path path;
  QBC_ASSERT_OK(load_text(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 100}, "merges": []}})",
                          &path));
  const std::string huge(1 << 20, 'x');
  auto tok = load_text(R"({"model": {"type": ")" + huge + R"(", "vocab": {"a": 0}}})", &path);
  ASSERT_FALSE(tok.ok());
  EXPECT_LT(tok.status().message().size(), 300u);
}

TEST(TokenizerHfJsonTest, MissingFiles) {
  const auto dir = testing::temp_dir();
  auto a = Tokenizer::from_hf_json(dir / "nope.json");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), Code::kNotFound);
  EXPECT_NE(a.status().message().find("nope.json"), std::string::npos);
  auto b = Tokenizer::from_hf_dir(dir);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Code::kNotFound);
  auto c = tokenizer_from_gguf(dir / "nope.gguf");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace qbc::frontend
