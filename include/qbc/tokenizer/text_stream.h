// Streaming detokenization: the text that newly generated token ids add after a prompt.
//
// Decoding the new ids alone is wrong for SentencePiece vocabularies: the decoder strips the
// space its "▁" stands for from the start of a text, so "Once" + ids(" upon a time") would
// print "Onceupon a time". TextStream decodes the new ids together with the last ids before
// them (HF text-generation-inference's prefix/read offsets, llama.cpp's per-token pieces after
// the prompt) and emits only the difference, holding back bytes that end in an incomplete
// UTF-8 character until the character is complete. Byte-level BPE decodes are plain
// concatenations, so for them the output is exactly the new ids' bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "qbc/tokenizer/tokenizer.h"

namespace qbc::tokenizer {

class TextStream {
 public:
  /// Ids decoded as context before the first pushed id (at most this many of the last ones
  /// before it): enough for a space, a word or a multi-byte character split over tokens.
  static constexpr size_t kContextIds = 4;

  /// A stream continuing `context` (the prompt's ids, BOS included or not).
  TextStream(Tokenizer tok, const std::vector<int32_t>& context);
  /// Adds a generated id and returns the text it completes ("" while a UTF-8 character is
  /// still incomplete, or for ids that decode to nothing, such as a skipped EOS).
  std::string push(int32_t id);
  /// The text held back so far (an incomplete UTF-8 character at the end), as bytes.
  std::string finish();

 private:
  std::string decode_from(size_t begin, size_t end) const;

  Tokenizer tok_;
  std::vector<int32_t> ids_;  ///< context tail + pushed ids not yet behind the prefix
  size_t prefix_ = 0;         ///< ids_[prefix_, read_) is the text already emitted
  size_t read_ = 0;
};

/// The text `ids` add after `context`: what a TextStream over `context` emits for them,
/// finish() included. prompt + decode_continuation(tok, prompt_ids, new_ids) is the text as
/// llama.cpp and HF streamers print it.
std::string decode_continuation(const Tokenizer& tok, const std::vector<int32_t>& context,
                                const std::vector<int32_t>& ids);

}  // namespace qbc::tokenizer
