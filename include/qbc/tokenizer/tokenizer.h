// Tokenizer: text <-> token ids for the LLMs qbc compiles.
//
// Two BPE families are supported, loaded from a HuggingFace `tokenizer.json` or from the
// vocabulary stored in GGUF metadata:
//  - SentencePiece-style BPE (Llama 1/2, Mistral v0.1, stories260K): "▁" marks spaces, a
//    space is prepended to the text, characters missing from the vocabulary fall back to
//    `<0xNN>` byte tokens. Merges come from a merge list (HF) or token scores (GGUF "llama",
//    llama.cpp's llm_tokenizer_spm).
//  - Byte-level BPE (GPT-2, Llama 3, Qwen2): a regex pre-tokenizer (run with PCRE2) splits
//    the text, bytes are mapped to GPT-2's printable unicode alphabet, ranked merges apply.
// A loader outside this library (the GGUF vocabulary of qbc_frontend) fills a VocabData
// (qbc/tokenizer/vocab_data.h) and calls from_data().
// Added and special tokens are matched before pre-tokenization. Ids match llama.cpp's
// llama_tokenize(add_special, parse_special) and HF tokenizers on the tested vocabularies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qbc/support/status.h"
#include "qbc/tokenizer/vocab_data.h"

namespace qbc::tokenizer {

namespace tok {
class Vocab;
}  // namespace tok

/// A loaded, immutable tokenizer. Cheap to copy (shares its vocabulary) and thread-safe.
class Tokenizer {
 public:
  /// Loads `dir/tokenizer.json`, plus `tokenizer_config.json` and `config.json` when
  /// present (add_bos_token, bos/eos tokens).
  static StatusOr<Tokenizer> from_hf_dir(const std::filesystem::path& dir);
  /// Loads a HF `tokenizer.json`; BOS/add_bos come from its post_processor. When
  /// `tokenizer_config` is non-empty it is read too and overrides them.
  static StatusOr<Tokenizer> from_hf_json(const std::filesystem::path& tokenizer_json,
                                          const std::filesystem::path& tokenizer_config = {});
  /// The same from the files' contents: `tokenizer_json` is required, `tokenizer_config` and
  /// `model_config` (config.json) are optional ("" = absent). `source` names the origin in
  /// errors (e.g. "q.mxq: asset tokenizer.json").
  static StatusOr<Tokenizer> from_hf_json_text(std::string_view tokenizer_json,
                                               std::string_view tokenizer_config,
                                               std::string_view model_config,
                                               std::string_view source);
  /// Validates `data` (a loader's output, e.g. the GGUF vocabulary of qbc_frontend) and builds
  /// its tables. With `strict_merges` a merge naming an unknown token is an error, otherwise it
  /// is dropped (llama.cpp's GGUF behaviour).
  static StatusOr<Tokenizer> from_data(VocabData data, std::string_view source,
                                       bool strict_merges);
  /// Reads the vocabulary asset `qbc_vocab.json` (docs/mxq.md, "Host assets"): every field of
  /// VocabData, written by to_vocab_json(). Errors name `source` and the JSON path.
  static StatusOr<Tokenizer> from_vocab_json(std::string_view text, std::string_view source);
  /// The vocabulary as `qbc_vocab.json`; from_vocab_json() of it encodes and decodes exactly
  /// as this tokenizer does. Deterministic (same vocabulary, same bytes).
  std::string to_vocab_json() const;

  /// Builds a tokenizer around a vocabulary made by one of the loaders (internal use).
  explicit Tokenizer(std::shared_ptr<const tok::Vocab> vocab);

  /// Encodes `text` (any bytes; invalid UTF-8 is kept as byte tokens). Prepends BOS when
  /// `add_bos` and the vocabulary has one; never appends EOS.
  /// With `parse_special`, control tokens written in the text (e.g. "<|im_start|>") become
  /// their ids; user-defined added tokens are always matched.
  std::vector<int32_t> encode(std::string_view text, bool add_bos,
                              bool parse_special = false) const;
  /// Encodes with the model's own defaults: BOS iff add_bos_default(), EOS iff
  /// add_eos_default(), no special-token parsing.
  std::vector<int32_t> encode(std::string_view text) const;

  /// Decodes ids to bytes. Out-of-range ids are skipped; control tokens (BOS/EOS/...) are
  /// skipped when `skip_special`, else written as their text.
  std::string decode(const int32_t* ids, size_t n, bool skip_special = true) const;
  /// Same, for a vector.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = true) const;

  /// The vocabulary entry of `id` as stored ("▁the", "Ġthe", "<0x0A>"); "" if out of range.
  std::string token_text(int32_t id) const;
  /// The bytes `id` decodes to on its own ("<0x0A>" -> "\n", "▁the" -> " the").
  std::string token_to_piece(int32_t id) const;
  /// The id of a vocabulary entry, if any.
  std::optional<int32_t> token_id(std::string_view text) const;
  /// The type of `id`; kUndefined if out of range.
  TokenType token_type(int32_t id) const;

  /// Beginning-of-sequence id, or -1 when the vocabulary has none.
  int32_t bos_id() const;
  /// End-of-sequence id, or -1.
  int32_t eos_id() const;
  /// Unknown-token id, or -1.
  int32_t unk_id() const;
  /// Padding id, or -1.
  int32_t pad_id() const;
  /// Whether the model's own setting prepends BOS (tokenizer.json / GGUF add_bos_token).
  bool add_bos_default() const;
  /// Whether the model's own setting appends EOS (tokenizer.json template / GGUF).
  bool add_eos_default() const;
  /// Number of ids (model vocabulary plus added tokens).
  int32_t vocab_size() const;
  /// The algorithm family.
  TokenizerKind kind() const;
  /// The pre-tokenizer name ("gpt-2", "llama3", "qwen2", "hf-json", ...); "" for SPM.
  const std::string& pre_tokenizer() const;

 private:
  std::shared_ptr<const tok::Vocab> vocab_;
};

}  // namespace qbc::tokenizer
