#include "qbc/support/quote.h"

#include <cstdio>

#include "qbc/support/utf8.h"

namespace qbc {
namespace {

// The end of the longest prefix of `value` of at most `max` bytes that does not split a UTF-8
// sequence.
size_t utf8_cut(std::string_view value, size_t max) {
  if (value.size() <= max) return value.size();
  size_t cut = max;
  // Step back over continuation bytes (10xxxxxx), at most 3, to the start of a character.
  for (int i = 0; i < 3 && cut > 0 && (static_cast<unsigned char>(value[cut]) & 0xC0) == 0x80;
       ++i) {
    --cut;
  }
  return cut;
}

// Control characters and bytes that are not part of a well-formed UTF-8 sequence are written
// as \xNN: a quoted value never breaks a message's line, and a message stays valid UTF-8 (it
// may be written into a JSON event).
void append_escaped(std::string& out, std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto u = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_valid_length(s, i);
    if (n == 0 || u < 0x20 || u == 0x7F) {
      char buf[5];
      std::snprintf(buf, sizeof(buf), "\\x%02X", u);
      out += buf;
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
}

}  // namespace

std::string clip_prefix(std::string_view value, size_t max) {
  const size_t cut = utf8_cut(value, max);
  std::string out;
  out.reserve(cut + 32);
  append_escaped(out, value.substr(0, cut));
  if (cut < value.size()) out += "\xE2\x80\xA6 (" + std::to_string(value.size()) + " bytes)";
  return out;
}

std::string quote_prefix(std::string_view value, size_t max) {
  const size_t cut = utf8_cut(value, max);
  std::string out = "'";
  out.reserve(cut + 32);
  append_escaped(out, value.substr(0, cut));
  if (cut < value.size()) {
    out += "\xE2\x80\xA6' (" + std::to_string(value.size()) + " bytes)";
  } else {
    out += "'";
  }
  return out;
}

}  // namespace qbc
