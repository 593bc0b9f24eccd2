// llama.cpp's tokenizer test vectors (test-tokenizer-0 format) against the GGUF vocabularies
// in shared/tokenizers/ggml-vocab: every case must give exactly llama.cpp's ids.
#include <gtest/gtest.h>

#include <sstream>
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

// Cases are separated by "\n__ggml_vocab_test__\n"; the text after the last marker is unused.
std::vector<std::string> read_cases(const std::filesystem::path& inp) {
  std::string raw = testing::read_file(inp);
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> cases;
  for (size_t pos = raw.find(sep); pos != std::string::npos; pos = raw.find(sep)) {
    cases.push_back(raw.substr(0, pos));
    raw.erase(0, pos + sep.size());
  }
  return cases;
}

std::vector<std::vector<int32_t>> read_ids(const std::filesystem::path& out) {
  std::istringstream in(testing::read_file(out));
  std::vector<std::vector<int32_t>> lines;
  for (std::string line; std::getline(in, line);) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    for (int32_t id; ls >> id;) ids.push_back(id);
    lines.push_back(std::move(ids));
  }
  return lines;
}

void check_vocab(const std::filesystem::path& gguf, TokenizerKind kind) {
  auto tok = tokenizer_from_gguf(gguf);
  QBC_ASSERT_OK(tok);
  EXPECT_EQ(tok->kind(), kind);
  const auto cases = read_cases(gguf.string() + ".inp");
  const auto expected = read_ids(gguf.string() + ".out");
  ASSERT_EQ(cases.size(), expected.size());
  ASSERT_GT(cases.size(), 40u);
  size_t matched = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<int32_t> ids = tok->encode(cases[i], /*add_bos=*/false);
    EXPECT_EQ(ids, expected[i]) << "case " << i << ": '" << cases[i] << "'";
    if (ids == expected[i]) ++matched;
    // The ids decode back to the text (llama.cpp's own round-trip check, modulo the SPM
    // leading space which decode strips).
    EXPECT_EQ(tok->decode(ids), cases[i]) << "case " << i;
  }
  std::cout << gguf.filename().string() << ": " << matched << "/" << cases.size()
            << " cases match llama.cpp\n";
}

TEST(TokenizerGgmlVocabTest, Gpt2ByteLevel) {
  QBC_REQUIRE_SHARED(path, "tokenizers/ggml-vocab/ggml-vocab-gpt-2.gguf");
  check_vocab(path, TokenizerKind::kByteLevel);
}

TEST(TokenizerGgmlVocabTest, LlamaSpm) {
  QBC_REQUIRE_SHARED(path, "tokenizers/ggml-vocab/ggml-vocab-llama-spm.gguf");
  check_vocab(path, TokenizerKind::kSentencePiece);
}

TEST(TokenizerGgmlVocabTest, Gpt2Metadata) {
  QBC_REQUIRE_SHARED(path, "tokenizers/ggml-vocab/ggml-vocab-gpt-2.gguf");
  auto tok = tokenizer_from_gguf(path);
  QBC_ASSERT_OK(tok);
  EXPECT_EQ(tok->vocab_size(), 50257);
  EXPECT_EQ(tok->bos_id(), 50256);
  EXPECT_EQ(tok->eos_id(), 50256);
  EXPECT_FALSE(tok->add_bos_default());
  EXPECT_EQ(tok->pre_tokenizer(), "gpt-2");
  EXPECT_EQ(tok->token_type(50256), TokenType::kControl);
  // "<|endoftext|>" is matched as the control token only with parse_special.
  EXPECT_EQ(tok->encode("a<|endoftext|>", false, /*parse_special=*/true),
            (std::vector<int32_t>{64, 50256}));
  EXPECT_NE(tok->encode("a<|endoftext|>", false).size(), 2u);
  EXPECT_EQ(tok->decode(tok->encode("a<|endoftext|>", false, true), /*skip_special=*/false),
            "a<|endoftext|>");
}

TEST(TokenizerGgmlVocabTest, LlamaSpmMetadata) {
  QBC_REQUIRE_SHARED(path, "tokenizers/ggml-vocab/ggml-vocab-llama-spm.gguf");
  auto tok = tokenizer_from_gguf(path);
  QBC_ASSERT_OK(tok);
  EXPECT_EQ(tok->vocab_size(), 32000);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->unk_id(), 0);
  EXPECT_TRUE(tok->add_bos_default());
  EXPECT_EQ(tok->token_text(13), "<0x0A>");
  EXPECT_EQ(tok->token_to_piece(13), "\n");
  EXPECT_EQ(tok->token_type(13), TokenType::kByte);
  EXPECT_EQ(tok->encode("Hello world", true).front(), 1);
}

}  // namespace
}  // namespace qbc::frontend
