// Regex pre-tokenizers: split text into words before BPE, with PCRE2 (UTF + UCP, JIT).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qbc/support/status.h"
#include "qbc/tokenizer/vocab_data.h"

namespace qbc::tokenizer::tok {

/// A list of compiled regexes applied one after another, llama.cpp's unicode_regex_split and
/// HF's Split(behavior = "Isolated"): each regex cuts every current piece into its matches
/// and the gaps between them (both kept), so the pieces always cover the text exactly.
/// Invalid UTF-8 never matches and ends up in the gaps. Copies share the compiled code.
class RegexSplitter {
 public:
  /// An empty splitter: split() returns the text as one piece.
  RegexSplitter() = default;
  /// Compiles `patterns` (Perl/Oniguruma syntax with \p{L}, \p{N}, (?i:...), lookahead).
  static StatusOr<RegexSplitter> compile(const std::vector<std::string>& patterns);

  /// True when there is no regex.
  bool empty() const { return impl_ == nullptr; }
  /// Splits `text` into consecutive non-empty pieces that concatenate to `text`.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  struct Impl;
  std::shared_ptr<const Impl> impl_;
};

/// The GPT-2 pre-tokenizer regex (HF ByteLevel with use_regex = true).
std::string_view gpt2_pattern();

/// pre_tokenizer_patterns (the list of a GGUF pre-tokenizer name) is public:
/// qbc/tokenizer/vocab_data.h.
using tokenizer::pre_tokenizer_patterns;

/// Escapes `literal` so that it matches itself as a PCRE2 pattern.
std::string regex_escape(std::string_view literal);

}  // namespace qbc::tokenizer::tok
