// The vocabulary data model shared by every tokenizer loader and algorithm.
//
// Loaders (hf_tokenizer_json.cpp, vocab_json.cpp, frontend's gguf_vocab.cpp) fill a VocabData
// (qbc/tokenizer/vocab_data.h): tokens, merges and the text-preparation settings. Vocab::build()
// validates it once and adds the lookup tables the algorithms need (text -> id, merge pair ->
// rank, byte -> fallback token, added-token list).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "qbc/tokenizer/tokenizer.h"
#include "qbc/tokenizer/vocab_data.h"
#include "qbc/support/status.h"
#include "pretokenize.h"

namespace qbc::tokenizer::tok {

using tokenizer::MergeOrder;
using tokenizer::TokenInfo;
using tokenizer::VocabData;

/// A validated vocabulary with lookup tables. Immutable after build().
class Vocab {
 public:
  /// Validates `data` and builds the tables. `source` names the file for errors. With
  /// `strict_merges`, a merge naming an unknown token is an error (HF); otherwise it is
  /// dropped (llama.cpp tolerates them in GGUF).
  static StatusOr<std::shared_ptr<const Vocab>> build(VocabData data, std::string_view source,
                                                      bool strict_merges);

  /// The loader's data.
  const VocabData& data() const { return data_; }
  /// Number of ids.
  int32_t size() const { return static_cast<int32_t>(data_.tokens.size()); }
  /// True iff 0 <= id < size().
  bool valid(int32_t id) const { return id >= 0 && id < size(); }
  /// The entry of a valid id.
  const TokenInfo& token(int32_t id) const { return data_.tokens[id]; }
  /// The id whose text is exactly `text`, or -1.
  int32_t find(std::string_view text) const;
  /// The rank of merging `left` with `right` (ids), or -1 when they do not merge. On success
  /// `merged` receives the id of the result.
  int32_t merge_rank(int32_t left, int32_t right, int32_t& merged) const;
  /// The fallback token of a raw byte (`<0xNN>`, or the byte itself as a token), or -1.
  int32_t byte_token(uint8_t byte) const { return byte_tokens_[byte]; }
  /// The byte a kByte token stands for, or -1.
  int byte_of_token(int32_t id) const;
  /// Added tokens (control, user-defined, unknown) whose text starts with byte `b`,
  /// longest first, for matching them in raw text.
  const std::vector<int32_t>& added_starting_with(uint8_t b) const { return added_[b]; }
  /// The pre-tokenizer regexes, compiled.
  const RegexSplitter& splitter() const { return splitter_; }

 private:
  explicit Vocab(VocabData data) : data_(std::move(data)) {}

  VocabData data_;
  std::unordered_map<std::string, int32_t> text_to_id_;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;  // (l,r) -> (rank, id)
  std::array<int32_t, 256> byte_tokens_{};
  std::array<std::vector<int32_t>, 256> added_;
  RegexSplitter splitter_;
};

}  // namespace qbc::tokenizer::tok
