// GGUF vocabulary loading on small hand-written GGUF files: the SPM score order, gpt2 +
// pre-tokenizer names, defaults and the errors naming the file and key.
#include <gtest/gtest.h>

#include <cstring>
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
