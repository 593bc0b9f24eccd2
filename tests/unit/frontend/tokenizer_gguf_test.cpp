// GGUF vocabulary loading on small hand-written GGUF files: the SPM score order, gpt2 +
// pre-tokenizer names, defaults and the errors naming the file and key.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
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

// Writes GGUF v3 metadata-only files (no tensors).
class GgufBuilder {
 public:
  GgufBuilder& str(const std::string& key, const std::string& v) {
    head(key, 8);
    string(v);
    ++n_;
    return *this;
  }
  GgufBuilder& u32(const std::string& key, uint32_t v) {
    head(key, 4);
    pod(v);
    ++n_;
    return *this;
  }
  GgufBuilder& boolean(const std::string& key, bool v) {
    head(key, 7);
    pod(static_cast<uint8_t>(v));
    ++n_;
    return *this;
  }
  GgufBuilder& strs(const std::string& key, const std::vector<std::string>& v) {
    head(key, 9);
    pod(uint32_t{8});
    pod(static_cast<uint64_t>(v.size()));
    for (const auto& s : v) string(s);
    ++n_;
    return *this;
  }
  GgufBuilder& f32s(const std::string& key, const std::vector<float>& v) {
    head(key, 9);
    pod(uint32_t{6});
    pod(static_cast<uint64_t>(v.size()));
    for (float f : v) pod(f);
    ++n_;
    return *this;
  }
  GgufBuilder& i32s(const std::string& key, const std::vector<int32_t>& v) {
    head(key, 9);
    pod(uint32_t{5});
    pod(static_cast<uint64_t>(v.size()));
    for (int32_t x : v) pod(x);
    ++n_;
    return *this;
  }
  std::filesystem::path write() const {
    std::string out = "GGUF";
    auto put = [&](auto v) { out.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
    put(uint32_t{3});
    put(uint64_t{0});
    put(n_);
    out += body_;
    while (out.size() % 32 != 0) out.push_back('\0');
    const auto path = testing::temp_dir() / "vocab.gguf";
    testing::write_file(path, out);
    return path;
  }

 private:
  template <typename T>
  void pod(T v) {
    body_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  void string(const std::string& s) {
    pod(static_cast<uint64_t>(s.size()));
    body_ += s;
  }
  void head(const std::string& key, uint32_t type) {
    string(key);
    pod(type);
  }
  std::string body_;
  uint64_t n_ = 0;
};

const std::string kMark = "\xE2\x96\x81";  // ▁

GgufBuilder tiny_spm() {
  // "▁a" scores lower than "ab": in "▁ab" the pair a+b merges first.
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", kMark, "a", "b", kMark + "a", "ab"};
  std::vector<float> scores = {0, 0, 0, -3, -4, -5, -2, -1};
  std::vector<int32_t> types = {2, 3, 3, 1, 1, 1, 1, 1};
  GgufBuilder b;
  b.str("tokenizer.ggml.model", "llama")
      .strs("tokenizer.ggml.tokens", tokens)
      .f32s("tokenizer.ggml.scores", scores)
      .i32s("tokenizer.ggml.token_type", types);
  return b;
}

TEST(TokenizerGgufTest, SpmMergesByScore) {
  auto tok = tokenizer_from_gguf(tiny_spm().write());
  QBC_ASSERT_OK(tok);
  EXPECT_EQ(tok->kind(), TokenizerKind::kSentencePiece);
  // llama defaults without the optional keys: BOS 1, EOS 2, UNK 0, add BOS.
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->unk_id(), 0);
  EXPECT_TRUE(tok->add_bos_default());
  EXPECT_EQ(tok->encode("ab", true), (std::vector<int32_t>{1, 3, 7}));
  EXPECT_EQ(tok->encode("a", false), (std::vector<int32_t>{6}));
  // No byte tokens: an unknown character becomes <unk>.
  EXPECT_EQ(tok->encode("z", false), (std::vector<int32_t>{3, 0}));
  EXPECT_EQ(tok->decode({1, 3, 7}), "ab");
}

TEST(TokenizerGgufTest, SpmOptionalKeys) {
  auto b = tiny_spm();
  b.boolean("tokenizer.ggml.add_bos_token", false)
      .boolean("tokenizer.ggml.add_space_prefix", false)
      .u32("tokenizer.ggml.eos_token_id", 1)
      .u32("tokenizer.ggml.padding_token_id", 0xFFFFFFFFu);  // out of range: ignored
  auto tok = tokenizer_from_gguf(b.write());
  QBC_ASSERT_OK(tok);
  EXPECT_FALSE(tok->add_bos_default());
  EXPECT_EQ(tok->eos_id(), 1);
  EXPECT_EQ(tok->pad_id(), -1);
  EXPECT_EQ(tok->encode("ab", false), (std::vector<int32_t>{7}));
  EXPECT_EQ(tok->decode({7}), "ab");
}

GgufBuilder tiny_gpt2(const std::string& pre) {
  std::vector<std::string> tokens;
  for (char c = 'a'; c <= 'z'; ++c) tokens.emplace_back(1, c);
  tokens.push_back("\xC4\xA0");         // 26: Ġ (space)
  tokens.push_back("ab");               // 27
  tokens.push_back(tokens[26] + "ab");  // 28: Ġab
  tokens.push_back("<|end|>");          // 29
  std::vector<int32_t> types(tokens.size(), 1);
  types.back() = 3;
  GgufBuilder b;
  b.str("tokenizer.ggml.model", "gpt2")
      .strs("tokenizer.ggml.tokens", tokens)
      .i32s("tokenizer.ggml.token_type", types)
      .strs("tokenizer.ggml.merges", {"a b", tokens[26] + " ab"})
      .u32("tokenizer.ggml.eos_token_id", 29);
  if (!pre.empty()) b.str("tokenizer.ggml.pre", pre);
  return b;
}

TEST(TokenizerGgufTest, Gpt2PreTokenizers) {
  for (const std::string pre : {"gpt-2", "llama3", "llama-bpe", "qwen2", "default", ""}) {
    auto tok = tokenizer_from_gguf(tiny_gpt2(pre).write());
    QBC_ASSERT_OK(tok);
    EXPECT_EQ(tok->kind(), TokenizerKind::kByteLevel);
    EXPECT_EQ(tok->pre_tokenizer(), pre.empty() ? "default" : pre);
    EXPECT_EQ(tok->encode("ab ab", false), (std::vector<int32_t>{27, 28})) << pre;
    EXPECT_EQ(tok->encode("ab<|end|>", false, true), (std::vector<int32_t>{27, 29})) << pre;
    EXPECT_EQ(tok->eos_id(), 29);
    // llama.cpp: only the Llama 3 family adds BOS by default.
    EXPECT_EQ(tok->add_bos_default(), pre == "llama3" || pre == "llama-bpe") << pre;
  }
}

// GPT-2's byte-to-unicode table (openai/gpt-2 encoder.py bytes_to_unicode, the form GGUF gpt2
// vocabularies store tokens in): printable Latin-1 bytes map to themselves, the other bytes to
// U+0100 onwards in byte order.
std::string byte_level(const std::string& raw) {
  auto printable = [](int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  };
  std::string out;
  for (unsigned char c : raw) {
    int cp = c;
    if (!printable(c)) {
      cp = 256;
      for (int b = 0; b < c; ++b) cp += !printable(b);
    }
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

// The byte-level characters of `raw`, one string each.
std::vector<std::string> byte_level_chars(const std::string& raw) {
  std::vector<std::string> out;
  for (unsigned char c : raw) out.push_back(byte_level(std::string(1, static_cast<char>(c))));
  return out;
}

// A gpt2 vocabulary with pre-tokenizer `pre`: the 256 byte tokens (ids 0-255, in byte order)
// and, for every string of `pieces`, one token reached by left-to-right merges (longer pieces'
// merges ranked first, so a shorter piece's merges never cut a longer one's chain). A piece is
// then one token exactly when the pre-tokenizer cuts it out of the text whole.
struct PieceVocab {
  GgufBuilder gguf;
  std::map<std::string, int32_t> id;  // raw piece -> token id
};

PieceVocab piece_vocab(const std::string& pre, std::vector<std::string> pieces) {
  PieceVocab v;
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(byte_level(std::string(1, static_cast<char>(b))));
  std::sort(pieces.begin(), pieces.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  std::vector<std::string> merges;
  std::set<std::string> seen_merges, seen_tokens(tokens.begin(), tokens.end());
  for (const std::string& p : pieces) {
    const std::vector<std::string> chars = byte_level_chars(p);
    std::string left = chars[0];
    for (size_t i = 1; i < chars.size(); ++i) {
      const std::string m = left + " " + chars[i];
      if (seen_merges.insert(m).second) merges.push_back(m);
      left += chars[i];
      if (seen_tokens.insert(left).second) tokens.push_back(left);
    }
  }
  for (int32_t i = 0; i < static_cast<int32_t>(tokens.size()); ++i) {
    for (const std::string& p : pieces) {
      if (byte_level(p) == tokens[static_cast<size_t>(i)]) v.id[p] = i;
    }
  }
  v.gguf.str("tokenizer.ggml.model", "gpt2")
      .str("tokenizer.ggml.pre", pre)
      .strs("tokenizer.ggml.tokens", tokens)
      .i32s("tokenizer.ggml.token_type", std::vector<int32_t>(tokens.size(), 1))
      .strs("tokenizer.ggml.merges", merges)
      .u32("tokenizer.ggml.eos_token_id", 0);
  return v;
}

// One input split by one llama.cpp pre-tokenizer. The expected pieces are worked out by hand
// from the regexes llama.cpp's llama-vocab.cpp lists for each name (the same patterns as the HF
// tokenizer.json Split pre-tokenizers of Llama 3, Qwen2 and SmolLM), matched leftmost-first with
// the text between matches kept as pieces:
//   gpt-2:  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
//   llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
//           | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2:  llama3 with \p{N} for \p{N}{1,3}
//   smollm: \p{N}, then gpt-2 on each piece
struct PretokCase {
  const char* pre;
  const char* text;
  std::vector<std::string> pieces;
};

std::vector<PretokCase> pretok_cases() {
  const char* contractions = "I'VE don't 12345 apples";
  const char* unicode = "\xC2\xBFQu\xC3\xA9 (\xEC\x95\x88\xEB\x85\x95)";  // ¿Qué (안녕)
  const std::string qu = "\xC2\xBFQu\xC3\xA9", hangul = "\xEC\x95\x88\xEB\x85\x95";
  return {
      // Case-insensitive contractions, digits in threes.
      {"llama3", contractions, {"I", "'VE", " don", "'t", " ", "123", "45", " apples"}},
      {"llama-bpe", contractions, {"I", "'VE", " don", "'t", " ", "123", "45", " apples"}},
      // Single digits.
      {"qwen2", contractions, {"I", "'VE", " don", "'t", " ", "1", "2", "3", "4", "5", " apples"}},
      // Case-sensitive contractions, a digit run with its space.
      {"gpt-2", contractions, {"I", "'", "VE", " don", "'t", " 12345", " apples"}},
      // Digits cut out first, then gpt-2 (the space before them stands alone).
      {"smollm",
       contractions,
       {"I", "'", "VE", " don", "'t", " ", "1", "2", "3", "4", "5", " apples"}},
      // A non-letter prefix joins the letters after it (llama3 / qwen2), not in gpt-2.
      {"llama3", unicode, {qu, " (", hangul, ")"}},
      {"qwen2", unicode, {qu, " (", hangul, ")"}},
      {"gpt-2", unicode, {"\xC2\xBF", "Qu\xC3\xA9", " (", hangul, ")"}},
      {"smollm", unicode, {"\xC2\xBF", "Qu\xC3\xA9", " (", hangul, ")"}},
      // Whitespace runs: the last space goes with the word; newlines after punctuation stay
      // with it in llama3 / qwen2, and gpt-2 cuts "\n\n" before a letter into two.
      {"llama3", "a  b\n\n c x!\n\ny", {"a", " ", " b", "\n\n", " c", " x", "!\n\n", "y"}},
      {"qwen2", "a  b\n\n c x!\n\ny", {"a", " ", " b", "\n\n", " c", " x", "!\n\n", "y"}},
      {"gpt-2", "a  b\n\n c x!\n\ny", {"a", " ", " b", "\n\n", " c", " x", "!", "\n", "\n", "y"}},
      {"smollm", "a  b\n\n c x!\n\ny", {"a", " ", " b", "\n\n", " c", " x", "!", "\n", "\n", "y"}},
  };
}

TEST(TokenizerGgufTest, PreTokenizersSplitAsTheirRegexesSay) {
  // One vocabulary holds every case's pieces, so a wrong split meets tokens of another case's
  // split (e.g. "123" for qwen2) and shows as different ids.
  std::vector<std::string> all;
  for (const PretokCase& c : pretok_cases())
    all.insert(all.end(), c.pieces.begin(), c.pieces.end());
  for (const PretokCase& c : pretok_cases()) {
    SCOPED_TRACE(std::string(c.pre) + ": " + c.text);
    PieceVocab v = piece_vocab(c.pre, all);
    auto tok = tokenizer_from_gguf(v.gguf.write());
    QBC_ASSERT_OK(tok);
    EXPECT_EQ(tok->pre_tokenizer(), c.pre);
    std::vector<int32_t> expect;
    std::string joined;
    for (const std::string& p : c.pieces) {
      ASSERT_EQ(v.id.count(p), 1u) << p;
      // The vocabulary's own check: each piece alone is its one token.
      EXPECT_EQ(tok->encode(p, false), (std::vector<int32_t>{v.id[p]})) << p;
      expect.push_back(v.id[p]);
      joined += p;
    }
    ASSERT_EQ(joined, c.text);
    EXPECT_EQ(tok->encode(c.text, false), expect);
    EXPECT_EQ(tok->decode(tok->encode(c.text, false)), c.text);
  }
}

void expect_error(const GgufBuilder& b, Code code, const std::string& needle) {
  const auto path = b.write();
  auto tok = tokenizer_from_gguf(path);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), code) << tok.status().to_string();
  EXPECT_NE(tok.status().message().find(path.string()), std::string::npos)
      << tok.status().to_string();
  EXPECT_NE(tok.status().message().find(needle), std::string::npos) << tok.status().to_string();
}

TEST(TokenizerGgufTest, Errors) {
  expect_error(GgufBuilder().str("general.name", "x"), Code::kNotFound, "tokenizer.ggml.model");
  expect_error(GgufBuilder().u32("tokenizer.ggml.model", 1), Code::kInvalidArgument,
               "tokenizer.ggml.model");
  expect_error(GgufBuilder().str("tokenizer.ggml.model", "bert"), Code::kUnimplemented,
               "tokenizer.ggml.model");
  expect_error(GgufBuilder().str("tokenizer.ggml.model", "llama"), Code::kNotFound,
               "tokenizer.ggml.tokens");
  expect_error(GgufBuilder()
                   .str("tokenizer.ggml.model", "llama")
                   .strs("tokenizer.ggml.tokens", {"a", "b"})
                   .f32s("tokenizer.ggml.scores", {0.0f}),
               Code::kInvalidArgument, "tokenizer.ggml.scores");
  expect_error(tiny_gpt2("no-such-pre"), Code::kUnimplemented, "tokenizer.ggml.pre");
  expect_error(
      GgufBuilder().str("tokenizer.ggml.model", "gpt2").strs("tokenizer.ggml.tokens", {"a", "b"}),
      Code::kNotFound, "tokenizer.ggml.merges");
  expect_error(GgufBuilder()
                   .str("tokenizer.ggml.model", "gpt2")
                   .strs("tokenizer.ggml.tokens", {"a", "b"})
                   .strs("tokenizer.ggml.merges", {"ab"}),
               Code::kInvalidArgument, "tokenizer.ggml.merges[0]");
}

}  // namespace
}  // namespace qbc::frontend
