// The vocabulary data model of qbc_tokenizer: what a loader knows about a tokenizer, as plain
// data. The loaders of this library (HF tokenizer.json, the qbc_vocab.json asset) and the GGUF
// vocabulary of qbc_frontend fill a VocabData; Tokenizer::from_data() validates it once and adds
// the lookup tables the algorithms need.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qbc::tokenizer {

/// The tokenization algorithm family.
enum class TokenizerKind {
  kSentencePiece,  ///< "▁"-escaped text, byte fallback tokens `<0xNN>`.
  kByteLevel,      ///< GPT-2 byte-to-unicode mapping plus a regex pre-tokenizer.
};

/// How a token id is treated when encoding and decoding (GGUF `tokenizer.ggml.token_type`).
enum class TokenType : uint8_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,      ///< Special token such as BOS/EOS; matched only with parse_special.
  kUserDefined = 4,  ///< Added token, always matched as a whole before pre-tokenization.
  kUnused = 5,
  kByte = 6,  ///< `<0xNN>` byte fallback token.
};

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

/// The regex list llama.cpp uses for GGUF `tokenizer.ggml.pre` = `name` ("gpt-2", "llama3",
/// "llama-bpe", "qwen2", "default", ...), or nullopt when the name is unknown.
std::optional<std::vector<std::string>> pre_tokenizer_patterns(std::string_view name);

}  // namespace qbc::tokenizer
