// UTF-8 helpers and the GPT-2 byte <-> unicode map used by byte-level BPE.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace qbc::tokenizer::tok {

/// Length of the UTF-8 sequence that `lead` starts, judged from its high bits only
/// (1 for ASCII and stray continuation bytes, 2/3/4 otherwise), as llama.cpp does.
/// The caller clamps it to the bytes left.
size_t utf8_seq_len(uint8_t lead);

/// Length of the character at `pos`: utf8_seq_len() of its lead byte when the sequence is
/// complete (all continuation bytes present), else 1, so that a broken sequence never
/// swallows the valid characters after it.
size_t utf8_char_len(std::string_view s, size_t pos);

/// Decodes one code point at `pos` (strictly: no overlongs, surrogates or truncation).
/// On success advances `pos` and returns true; on invalid input leaves `pos` unchanged.
bool utf8_decode(std::string_view s, size_t& pos, uint32_t& cp);

/// Appends the UTF-8 encoding of `cp` (must be <= 0x10FFFF) to `out`.
void utf8_append(uint32_t cp, std::string& out);

/// The UTF-8 text of the GPT-2 unicode character that stands for `byte`.
const std::string& byte_to_unicode(uint8_t byte);

/// The byte a GPT-2 unicode code point stands for, or -1 when `cp` is not in the map.
int unicode_to_byte(uint32_t cp);

/// Maps every byte of `raw` to its GPT-2 unicode character.
std::string bytes_to_unicode_text(std::string_view raw);

/// Maps GPT-2 unicode text back to bytes. Characters outside the map (and invalid UTF-8)
/// are copied through unchanged.
std::string unicode_text_to_bytes(std::string_view text);

/// The SentencePiece whitespace mark U+2581 "▁" in UTF-8.
inline constexpr std::string_view kSpaceMark = "\xE2\x96\x81";

/// Returns `s` with every `from` replaced by `to`.
std::string replace_all(std::string_view s, std::string_view from, std::string_view to);

}  // namespace qbc::tokenizer::tok
