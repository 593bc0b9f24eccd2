// The qbc_vocab.json asset: a vocabulary (GGUF "llama", HF tokenizer.json, built from data; the
// shared assets hold no byte-level vocabulary, so that kind is not round-tripped here) goes
// through to_vocab_json() and from_vocab_json() and encodes and decodes exactly as before;
// writing is deterministic; a bad file is refused with the JSON path named.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qbc/frontend/gguf_tokenizer.h"
#include "qbc/tokenizer/tokenizer.h"
#include "test_support.h"

namespace qbc::tokenizer {
namespace {

using ::qbc::testing::contains;

const std::vector<std::string>& texts() {
  static const std::vector<std::string> t = {
      "Once upon a time, there was a little girl named Lily.",
      "  leading spaces\tand\ttabs\nnew lines  ",
      "Émile ünïcode 日本語 🙂",
      "<s> not special </s>",
      std::string("raw \xff\xfe bytes"),
      "12345 numbers 3.14"};
  return t;
}

void expect_same(const Tokenizer& a, const Tokenizer& b, const std::string& what) {
  EXPECT_EQ(a.vocab_size(), b.vocab_size()) << what;
  EXPECT_EQ(a.bos_id(), b.bos_id()) << what;
  EXPECT_EQ(a.eos_id(), b.eos_id()) << what;
  EXPECT_EQ(a.add_bos_default(), b.add_bos_default()) << what;
  EXPECT_EQ(a.kind(), b.kind()) << what;
  for (const std::string& t : texts()) {
    const std::vector<int32_t> ids = a.encode(t, true);
    EXPECT_EQ(ids, b.encode(t, true)) << what << ": " << t;
    EXPECT_EQ(a.encode(t, false, true), b.encode(t, false, true)) << what << ": " << t;
    EXPECT_EQ(a.decode(ids), b.decode(ids)) << what << ": " << t;
  }
}

TEST(VocabJson, RoundTripsTheStoriesGgufAndHfVocabularies) {
  QBC_REQUIRE_SHARED(gguf, "models/stories260k/stories260K.gguf");
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  auto g = frontend::tokenizer_from_gguf(gguf);
  QBC_ASSERT_OK(g);
  auto h = Tokenizer::from_hf_dir(hf);
  QBC_ASSERT_OK(h);
  for (const auto* t : {&*g, &*h}) {
    const std::string json = t->to_vocab_json();
    EXPECT_EQ(json, t->to_vocab_json());  // deterministic
    auto back = Tokenizer::from_vocab_json(json, "test");
    QBC_ASSERT_OK(back);
    expect_same(*t, *back, t == &*g ? "gguf" : "hf");
    EXPECT_EQ(back->to_vocab_json(), json);
  }
  // The stories260K GGUF and HF vocabularies agree, so both MXQs tokenize alike.
  expect_same(*g, *h, "gguf vs hf");
}

TEST(VocabJson, NonUtf8TextTravelsAsHex) {
  VocabData d;
  d.kind = TokenizerKind::kSentencePiece;
  d.merge_order = MergeOrder::kByScore;
  d.byte_fallback = true;
  d.tokens.push_back({"<unk>", 0, TokenType::kUnknown});
  d.tokens.push_back({"a", -1, TokenType::kNormal});
  d.tokens.push_back({std::string("\xc3\x28"), -2, TokenType::kNormal});  // invalid UTF-8
  d.unk_id = 0;
  auto t = Tokenizer::from_data(d, "test", false);
  QBC_ASSERT_OK(t);
  const std::string json = t->to_vocab_json();
  EXPECT_TRUE(contains(json, "{\"hex\":\"c328\"}")) << json;
  auto back = Tokenizer::from_vocab_json(json, "test");
  QBC_ASSERT_OK(back);
  EXPECT_EQ(back->token_text(2), std::string("\xc3\x28"));
}

TEST(VocabJson, BadFilesAreRefusedNamingTheKey) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  auto h = Tokenizer::from_hf_dir(hf);
  QBC_ASSERT_OK(h);
  const nlohmann::json good = nlohmann::json::parse(h->to_vocab_json());
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"format", [](nlohmann::json& j) { j["format"] = "other"; }, "format"},
      {"version", [](nlohmann::json& j) { j["version"] = 2; }, "version 2"},
      {"kind", [](nlohmann::json& j) { j["kind"] = "wordpiece"; }, "kind"},
      {"flag", [](nlohmann::json& j) { j["add_bos"] = 1; }, "add_bos"},
      {"type", [](nlohmann::json& j) { j["types"][3] = 9; }, "types[3]"},
      {"scores", [](nlohmann::json& j) { j["scores"].erase(0); }, "scores"},
      {"bos", [](nlohmann::json& j) { j["bos_id"] = 1 << 30; }, "bos_id"},
      {"lstrip", [](nlohmann::json& j) { j["lstrip"] = {-4}; }, "lstrip[0]"},
      {"merge", [](nlohmann::json& j) { j["merges"][0] = "a b"; }, "merges[0]"},
      {"hex",
       [](nlohmann::json& j) {
         j["tokens"][5] = {{"hex", "zz"}};
       },
       "tokens[5]"},
      {"missing", [](nlohmann::json& j) { j.erase("tokens"); }, "tokens: missing"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = good;
    c.edit(j);
    auto t = Tokenizer::from_vocab_json(j.dump(), "q.mxq: asset qbc_vocab.json");
    ASSERT_FALSE(t.ok()) << c.what;
    EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << c.what;
    EXPECT_TRUE(contains(t.status().message(), "q.mxq: asset qbc_vocab.json")) << c.what;
    EXPECT_TRUE(contains(t.status().message(), c.message))
        << c.what << ": " << t.status().message();
  }
  EXPECT_FALSE(Tokenizer::from_vocab_json("{\"format\": ", "x").ok());
  EXPECT_FALSE(Tokenizer::from_vocab_json("[]", "x").ok());
}

}  // namespace
}  // namespace qbc::tokenizer
