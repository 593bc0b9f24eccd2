// Round trips, invalid UTF-8 and added/special tokens on the shared vocabularies.
#include <gtest/gtest.h>

#include <random>
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

struct Named {
  std::string name;
  Tokenizer tok;
};

// Every shared tokenizer that exists; the test skips (or fails under CI) when one is missing.
std::vector<Named> load_all() {
  std::vector<Named> all;
  const auto shared = testing::shared_dir();
  auto add = [&](const std::string& name, StatusOr<Tokenizer> t) {
    EXPECT_TRUE(t.ok()) << name << ": " << t.status().to_string();
    if (t.ok()) all.push_back({name, std::move(t).value()});
  };
  const auto hf = shared / "models/stories260k/hf";
  const auto gguf = shared / "models/stories260k/stories260K.gguf";
  const auto gpt2 = shared / "tokenizers/ggml-vocab/ggml-vocab-gpt-2.gguf";
  const auto spm = shared / "tokenizers/ggml-vocab/ggml-vocab-llama-spm.gguf";
  if (std::filesystem::exists(hf)) add("stories-hf", Tokenizer::from_hf_dir(hf));
  if (std::filesystem::exists(gguf)) add("stories-gguf", tokenizer_from_gguf(gguf));
  if (std::filesystem::exists(gpt2)) add("gpt-2", tokenizer_from_gguf(gpt2));
  if (std::filesystem::exists(spm)) add("llama-spm", tokenizer_from_gguf(spm));
  return all;
}

const std::vector<std::string>& texts() {
  static const std::vector<std::string> t = {
      "",
      "a",
      " ",
      "Hello world",
      "  two leading spaces",
      "trailing spaces   ",
      "tabs\tand\nnewlines\r\n\n\n",
      "digits 0 12 345 6789 3.14159 1,000,000",
      "contractions: it's, I'M, we'll, they'd, you've, can't",
      "unicode: café naïve Ærøskøbing Привет мир 杜甫 日本語のテキスト 한국어 العربية",
      "emoji 🙂🦙🚀 zwj 😶‍🌫️ flags 🇰🇷 skin 👍🏽",
      "symbols <s> </s> <unk> <|endoftext|> <0x0A> [INST] <<SYS>>",
      "code: for (int i = 0; i < n; ++i) { x[i] = y[i] * 2; }\n",
      "\xEF\xBB\xBF"
      "BOM and \xC2\xA0nbsp and \xE2\x80\x8Bzero width",
  };
  return t;
}

TEST(TokenizerRoundTripTest, DecodeOfEncodeIsIdentity) {
  const auto all = load_all();
  ASSERT_FALSE(all.empty() && std::getenv("CI") != nullptr);
  for (const auto& [name, tok] : all) {
    for (const std::string& text : texts()) {
      for (bool bos : {false, true}) {
        const auto ids = tok.encode(text, bos);
        for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size()) << name;
        EXPECT_EQ(tok.decode(ids), text) << name << " bos=" << bos << " text='" << text << "'";
      }
    }
  }
}

TEST(TokenizerRoundTripTest, SpaceMarkInInput) {
  // SentencePiece cannot tell a literal "▁" from an escaped space (nor can HF or llama.cpp),
  // so only byte-level vocabularies round-trip it; SPM decodes it as a space.
  for (const auto& [name, tok] : load_all()) {
    const std::string text = "x ▁ ▁▁y";
    const std::string expected = tok.kind() == TokenizerKind::kByteLevel ? text : "x     y";
    EXPECT_EQ(tok.decode(tok.encode(text, true)), expected) << name;
  }
}

TEST(TokenizerRoundTripTest, InvalidUtf8IsKeptAsBytes) {
  std::vector<std::string> bad = {"\xFF",
                                  "\xFF\xFE",
                                  "abc\xC3",
                                  "\xE6\x9D",
                                  "\xED\xA0\x80 surrogate",
                                  "a\x80"
                                  "b",
                                  "\xC0\xAF overlong",
                                  "\xF4\x90\x80\x80 too big",
                                  "mix \xE6\x9D\xBE\xE6 end",
                                  std::string("nul\0inside", 10)};
  std::mt19937 rng(1234);
  for (int n : {1, 7, 64, 1000}) {
    std::string s;
    for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(rng() & 0xFF));
    bad.push_back(s);
  }
  for (const auto& [name, tok] : load_all()) {
    for (const std::string& text : bad) {
      const auto ids = tok.encode(text, true, /*parse_special=*/true);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size()) << name;
      // Byte fallback (SPM) and the byte-level alphabet both preserve every byte.
      EXPECT_EQ(tok.decode(ids), text) << name;
    }
  }
}

TEST(TokenizerRoundTripTest, DecodeSkipsBadIdsAndSpecials) {
  for (const auto& [name, tok] : load_all()) {
    const std::vector<int32_t> ids = {-5, tok.vocab_size(), 1 << 30};
    EXPECT_EQ(tok.decode(ids), "") << name;
    EXPECT_EQ(tok.token_text(-1), "");
    EXPECT_EQ(tok.token_type(tok.vocab_size()), TokenType::kUndefined);
    if (tok.bos_id() >= 0) {
      EXPECT_EQ(tok.decode({tok.bos_id()}), "") << name;
      EXPECT_EQ(tok.decode({tok.bos_id()}, /*skip_special=*/false), tok.token_text(tok.bos_id()))
          << name;
    }
  }
}

TEST(TokenizerRoundTripTest, SpmControlTokensParsedOnlyOnRequest) {
  QBC_REQUIRE_SHARED(path, "tokenizers/ggml-vocab/ggml-vocab-llama-spm.gguf");
  auto tok = tokenizer_from_gguf(path);
  QBC_ASSERT_OK(tok);
  const auto with = tok->encode("a</s>b", false, /*parse_special=*/true);
  ASSERT_EQ(with.size(), 3u);
  EXPECT_EQ(with[1], tok->eos_id());
  // After a special token SentencePiece prefixes a space again (llama.cpp, HF legacy).
  EXPECT_EQ(tok->token_text(with[2]), "▁b");
  const auto without = tok->encode("a</s>b", false);
  EXPECT_EQ(std::count(without.begin(), without.end(), tok->eos_id()), 0);
  EXPECT_EQ(tok->decode(without), "a</s>b");
}

}  // namespace
}  // namespace qbc::frontend
