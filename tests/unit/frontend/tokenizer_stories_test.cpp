// stories260K golden tokenizations (llama.cpp ids, BOS prepended) for the whole data files
// and the edge strings in models/stories260k/golden/tokenization.json, reproduced from both
// hf/tokenizer.json (ranked merges) and stories260K.gguf (SentencePiece scores).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
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

// Minimal SHA-256 (FIPS 180-4), for the golden `ids_sha256` of the large files.
std::string sha256_hex(const std::string& msg) {
  static constexpr std::array<uint32_t, 64> k = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
      0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
      0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
      0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
      0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
      0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
      0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
      0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
      0xc67178f2};
  std::array<uint32_t, 8> h = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                               0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::string m = msg;
  const uint64_t bits = static_cast<uint64_t>(msg.size()) * 8;
  m.push_back(static_cast<char>(0x80));
  while (m.size() % 64 != 56) m.push_back('\0');
  for (int i = 7; i >= 0; --i) m.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  auto rotr = [](uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  for (size_t off = 0; off < m.size(); off += 64) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = 0;
      for (int j = 0; j < 4; ++j) w[i] = (w[i] << 8) | static_cast<uint8_t>(m[off + 4 * i + j]);
    }
    for (int i = 16; i < 64; ++i) {
      const uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    auto v = h;
    for (int i = 0; i < 64; ++i) {
      const uint32_t s1 = rotr(v[4], 6) ^ rotr(v[4], 11) ^ rotr(v[4], 25);
      const uint32_t ch = (v[4] & v[5]) ^ (~v[4] & v[6]);
      const uint32_t t1 = v[7] + s1 + ch + k[i] + w[i];
      const uint32_t s0 = rotr(v[0], 2) ^ rotr(v[0], 13) ^ rotr(v[0], 22);
      const uint32_t maj = (v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]);
      const uint32_t t2 = s0 + maj;
      v = {t1 + t2, v[0], v[1], v[2], v[3] + t1, v[4], v[5], v[6]};
    }
    for (int i = 0; i < 8; ++i) h[i] += v[i];
  }
  std::string hex;
  char buf[9];
  for (uint32_t x : h) {
    std::snprintf(buf, sizeof(buf), "%08x", x);
    hex += buf;
  }
  return hex;
}

std::string ids_sha256(const std::vector<int32_t>& ids) {
  std::string joined;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) joined += ',';
    joined += std::to_string(ids[i]);
  }
  return sha256_hex(joined);
}

TEST(TokenizerStoriesTest, Sha256Helper) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

// `expect_eos`: tokenizer.json alone does not name EOS (tokenizer_config.json does).
void check_golden(const Tokenizer& tok, bool expect_eos = true) {
  QBC_REQUIRE_SHARED(golden_path, "models/stories260k/golden/tokenization.json");
  const auto golden = nlohmann::json::parse(testing::read_file(golden_path));
  EXPECT_EQ(tok.bos_id(), 1);
  if (expect_eos) {
    EXPECT_EQ(tok.eos_id(), 2);
  }
  EXPECT_TRUE(tok.add_bos_default());
  EXPECT_EQ(tok.vocab_size(), 512);

  for (const auto& s : golden.at("strings")) {
    const std::string text = s.at("text").get<std::string>();
    const auto expected = s.at("ids").get<std::vector<int32_t>>();
    const auto ids = tok.encode(text, /*add_bos=*/true);
    EXPECT_EQ(ids, expected) << "text: '" << text << "'";
    EXPECT_EQ(tok.decode(ids), text);
  }
  for (const auto& f : golden.at("files")) {
    const std::string rel = f.at("file").get<std::string>();
    QBC_REQUIRE_SHARED(path, rel);
    const std::string text = testing::read_file(path);
    const auto ids = tok.encode(text, /*add_bos=*/true);
    ASSERT_EQ(static_cast<int64_t>(ids.size()), f.at("n_tokens").get<int64_t>()) << rel;
    EXPECT_EQ(ids_sha256(ids), f.at("ids_sha256").get<std::string>()) << rel;
    if (f.contains("ids")) {
      EXPECT_EQ(ids, f.at("ids").get<std::vector<int32_t>>()) << rel;
    } else {
      const auto first = f.at("first_256").get<std::vector<int32_t>>();
      const auto last = f.at("last_256").get<std::vector<int32_t>>();
      EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + first.size()), first) << rel;
      EXPECT_EQ(std::vector<int32_t>(ids.end() - last.size(), ids.end()), last) << rel;
    }
    EXPECT_EQ(tok.decode(ids), text) << rel;
  }
}

TEST(TokenizerStoriesTest, HfTokenizerJsonMatchesLlamaCpp) {
  QBC_REQUIRE_SHARED(dir, "models/stories260k/hf");
  auto tok = Tokenizer::from_hf_dir(dir);
  QBC_ASSERT_OK(tok);
  EXPECT_EQ(tok->kind(), TokenizerKind::kSentencePiece);
  check_golden(*tok);
}

TEST(TokenizerStoriesTest, HfTokenizerJsonAloneMatchesLlamaCpp) {
  QBC_REQUIRE_SHARED(json, "models/stories260k/hf/tokenizer.json");
  auto tok = Tokenizer::from_hf_json(json);  // BOS from the post_processor template
  QBC_ASSERT_OK(tok);
  check_golden(*tok, /*expect_eos=*/false);
}

TEST(TokenizerStoriesTest, GgufVocabMatchesLlamaCpp) {
  QBC_REQUIRE_SHARED(gguf, "models/stories260k/stories260K.gguf");
  auto tok = tokenizer_from_gguf(gguf);
  QBC_ASSERT_OK(tok);
  check_golden(*tok);
}

TEST(TokenizerStoriesTest, KnownPrompts) {
  QBC_REQUIRE_SHARED(gguf, "models/stories260k/stories260K.gguf");
  auto tok = tokenizer_from_gguf(gguf);
  QBC_ASSERT_OK(tok);
  // golden/README.md: greedy prompt and short_8.
  EXPECT_EQ(tok->encode("Once upon a time"), (std::vector<int32_t>{1, 403, 407, 261, 378}));
  EXPECT_EQ(tok->encode("Once upon a time, there was"),
            (std::vector<int32_t>{1, 403, 407, 261, 378, 432, 383, 286}));
}

}  // namespace
}  // namespace qbc::frontend
