// The two BPE merge loops. Both start from the UTF-8 characters of one word and repeatedly
// merge the best adjacent pair; they differ in what "best" means.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "vocab.h"

namespace qbc::tokenizer::tok {

/// Ranked BPE (HF `BPE` model, GGUF "gpt2"): merges the adjacent pair with the lowest
/// merge rank, leftmost first on ties. Appends the ids of `word` to `out`.
void bpe_encode_ranked(const Vocab& vocab, std::string_view word, std::vector<int32_t>& out);

/// SentencePiece BPE by score (GGUF "llama", llama.cpp's llm_tokenizer_spm): merges the
/// adjacent pair whose concatenation is the token with the highest score, leftmost first on
/// ties. `text` is already "▁"-escaped. Appends its ids to `out`.
void spm_encode_scored(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out);

/// Emits a piece of text that is not a token: its bytes as byte-fallback tokens when the
/// vocabulary has them all, else the unknown token (fused with a preceding one when the
/// vocabulary says so), else nothing.
void emit_unknown(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out,
                  bool& last_was_unk);

}  // namespace qbc::tokenizer::tok
