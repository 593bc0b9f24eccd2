// The vocabulary data model shared by every tokenizer loader and algorithm.
//
// Loaders (hf_tokenizer_json.cpp, gguf_vocab.cpp) fill a VocabData: tokens, merges and the
// text-preparation settings. Vocab::build() validates it once and adds the lookup tables the
// algorithms need (text -> id, merge pair -> rank, byte -> fallback token, added-token list).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "qbc/frontend/tokenizer.h"
#include "qbc/support/status.h"
#include "tokenizer/pretokenize.h"

namespace qbc::frontend::tok {

/// One vocabulary entry.
struct TokenInfo {
  std::string text;
  float score = 0.0f;
  TokenType type = TokenType::kNormal;
  bool lstrip = false;  ///< Added token swallows whitespace on its left.
  bool rstrip = false;  ///< Added token swallows whitespace on its right.
};

/// Which adjacent pair a BPE step merges first.
enum class MergeOrder {
  kByRank,   ///< Lowest rank in the merge list (HF BPE, GGUF "gpt2").
  kByScore,  ///< Highest score of the merged token (GGUF "llama", llama.cpp SPM).
};

/// Everything a loader knows about a tokenizer; plain data.
struct VocabData {
  TokenizerKind kind = TokenizerKind::kSentencePiece;
  MergeOrder merge_order = MergeOrder::kByRank;
  std::vector<TokenInfo> tokens;                            ///< Indexed by id.
  std::vector<std::pair<std::string, std::string>> merges;  ///< In rank order.

  bool byte_fallback = false;  ///< Unknown characters become `<0xNN>` tokens.
  bool fuse_unk = false;       ///< Consecutive unknown tokens collapse into one.
  bool ignore_merges = false;  ///< A pre-tokenized word that is a token is emitted whole.

  // SentencePiece-style text preparation.
  bool add_space_prefix = false;             ///< Prepend " " to each raw text fragment...
  bool space_prefix_first_only = false;      ///< ...but only to the fragment at offset 0.
  bool space_prefix_unless_present = false;  ///< ...unless it already starts with a space.
  bool escape_whitespace = false;            ///< Replace " " by "▁" before the model.
  bool split_on_space_mark = false;          ///< Metaspace split: words start at each "▁".

  // Byte-level text preparation.
  bool byte_level_prefix_space = false;    ///< HF ByteLevel add_prefix_space.
  std::vector<std::string> split_regexes;  ///< Applied in order, matches and gaps kept.
  std::string pre_name;                    ///< Name for diagnostics ("gpt-2", "hf-json").

  bool strip_leading_space_on_decode = false;

  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t unk_id = -1;
  int32_t pad_id = -1;
  bool add_bos = false;
  bool add_eos = false;
};

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

}  // namespace qbc::frontend::tok
