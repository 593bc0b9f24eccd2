// TextStream / decode_continuation: the text generated ids add after a prompt. With
// stories260K's SentencePiece vocabulary (HF tokenizer.json and GGUF) the first generated
// word keeps its space (" upon", not "upon"), as llama.cpp prints it; a character split over
// byte tokens comes out whole, once; with GPT-2's byte-level vocabulary and the Llama-SPM
// vocabulary of llama.cpp's tests the streamed text after any split point is exactly the rest
// of the whole decode.
#include "qbc/tokenizer/text_stream.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "qbc/frontend/gguf_tokenizer.h"
#include "qbc/tokenizer/tokenizer.h"
#include "test_support.h"

namespace qbc::tokenizer {
namespace {

const std::vector<std::string>& texts() {
  static const std::vector<std::string> t = {
      "Once upon a time, there was a little girl named Lily.",
      " Du Fu ( Wade \xe2\x80\x93 Giles : Tu Fu ; Chinese : \xe6\x9d\x9c\xe7\x94\xab ; 712",
      "  two  spaces and\na new line, \xf0\x9f\x99\x82 emoji"};
  return t;
}

// For every split of each text's ids into prompt + generated: prompt text + the streamed
// continuation is the decode of all ids, and every piece pushed is whole UTF-8 (or held).
void expect_streams_like_whole_decode(const Tokenizer& tok, const std::string& what) {
  for (const std::string& text : texts()) {
    const std::vector<int32_t> ids = tok.encode(text, tok.add_bos_default());
    const std::string whole = tok.decode(ids);
    for (size_t split = 1; split < ids.size(); ++split) {
      const std::vector<int32_t> prompt(ids.begin(), ids.begin() + split);
      const std::vector<int32_t> rest(ids.begin() + split, ids.end());
      EXPECT_EQ(tok.decode(prompt) + decode_continuation(tok, prompt, rest), whole)
          << what << " split " << split << ": " << text;
    }
  }
}

TEST(TextStream, SentencePieceKeepsTheFirstWordsSpace) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  auto tok = Tokenizer::from_hf_dir(hf);
  QBC_ASSERT_OK(tok);
  const std::vector<int32_t> prompt = tok->encode("Once", true);
  const std::vector<int32_t> all = tok->encode("Once upon a time,", true);
  ASSERT_EQ(std::vector<int32_t>(all.begin(), all.begin() + 2), prompt);
  const std::vector<int32_t> generated(all.begin() + 2, all.end());
  // The bug this fixes: decoding the new ids alone drops the space.
  EXPECT_EQ(tok->decode(generated), "upon a time,");
  EXPECT_EQ(decode_continuation(*tok, prompt, generated), " upon a time,");
  // Streaming gives the same pieces one token at a time.
  TextStream stream(*tok, prompt);
  std::string streamed;
  for (int32_t id : generated) {
    const std::string piece = stream.push(id);
    EXPECT_FALSE(piece.empty()) << id;
    streamed += piece;
  }
  EXPECT_EQ(streamed + stream.finish(), " upon a time,");
  // No context (a prompt of BOS only): the text starts without a space, as a whole decode.
  EXPECT_EQ(decode_continuation(*tok, {tok->bos_id()}, generated), "upon a time,");
  expect_streams_like_whole_decode(*tok, "stories260K tokenizer.json");
}

TEST(TextStream, ACharacterSplitOverByteTokensComesOutWholeOnce) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  auto tok = Tokenizer::from_hf_dir(hf);
  QBC_ASSERT_OK(tok);
  const std::string text = "Tu Fu \xe6\x9d\x9c\xe7\x94\xab";  // 杜甫: byte-fallback tokens
  const std::vector<int32_t> ids = tok->encode(text, true);
  const std::vector<int32_t> prompt(ids.begin(), ids.begin() + 3);  // BOS ▁Tu ▁Fu (or more)
  TextStream stream(*tok, prompt);
  std::vector<std::string> pieces;
  for (size_t i = 3; i < ids.size(); ++i) pieces.push_back(stream.push(ids[i]));
  const std::string tail = stream.finish();
  std::string joined;
  size_t held = 0;
  for (const std::string& p : pieces) {
    joined += p;
    held += p.empty();
  }
  EXPECT_EQ(tok->decode(prompt) + joined + tail, text);
  EXPECT_GE(held, 4u);  // the 6 bytes of two characters arrive as byte tokens
  EXPECT_TRUE(tail.empty());
  // A cut character: finish() hands back what was held.
  TextStream cut(*tok, prompt);
  std::string out;
  for (size_t i = 3; i + 1 < ids.size(); ++i) out += cut.push(ids[i]);
  const std::vector<int32_t> cut_ids(ids.begin(), ids.end() - 1);
  EXPECT_EQ(tok->decode(prompt) + out + cut.finish(), tok->decode(cut_ids));
}

TEST(TextStream, GgufVocabulariesStreamAsTheirWholeDecode) {
  QBC_REQUIRE_SHARED(stories, "models/stories260k/stories260K.gguf");
  QBC_REQUIRE_SHARED(gpt2, "tokenizers/ggml-vocab/ggml-vocab-gpt-2.gguf");
  QBC_REQUIRE_SHARED(spm, "tokenizers/ggml-vocab/ggml-vocab-llama-spm.gguf");
  for (const auto& path : {stories, gpt2, spm}) {
    auto tok = frontend::tokenizer_from_gguf(path);
    QBC_ASSERT_OK(tok);
    expect_streams_like_whole_decode(*tok, path.filename().string());
  }
  // Byte-level: the continuation is exactly the new ids' bytes (no space handling at all).
  auto tok = frontend::tokenizer_from_gguf(gpt2);
  QBC_ASSERT_OK(tok);
  const std::vector<int32_t> ids = tok->encode("Once upon a time", false);
  const std::vector<int32_t> rest(ids.begin() + 1, ids.end());
  EXPECT_EQ(decode_continuation(*tok, {ids[0]}, rest), " upon a time");
  EXPECT_EQ(decode_continuation(*tok, {ids[0]}, rest), tok->decode(rest));
}

TEST(TextStream, QwenShapedTinyTokenizersStreamAsTheirWholeDecode) {
  for (const char* rel : {"models/tiny/qwen2/hf", "models/tiny/qwen3/hf"}) {
    QBC_REQUIRE_SHARED(dir, rel);
    auto tok = Tokenizer::from_hf_dir(dir);
    QBC_ASSERT_OK(tok);
    expect_streams_like_whole_decode(*tok, rel);
  }
}

}  // namespace
}  // namespace qbc::tokenizer
