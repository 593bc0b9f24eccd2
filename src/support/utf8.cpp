// UTF-8 validation (see qbc/support/utf8.h).
#include "qbc/support/utf8.h"

#include <cstdint>
#include <cstdio>

namespace qbc {
namespace {

std::string hex_byte(unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "0x%02X", c);
  return buf;
}

}  // namespace

size_t utf8_valid_length(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  const auto c = static_cast<unsigned char>(s[pos]);
  if (c < 0x80) return 1;
  size_t n = 0;
  uint32_t cp = 0;
  if ((c & 0xE0) == 0xC0) {
    n = 1, cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 2, cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 3, cp = c & 0x07;
  } else {
    return 0;  // a continuation byte, or 0xF8..0xFF
  }
  if (s.size() - pos <= n) return 0;
  for (size_t k = 1; k <= n; ++k) {
    const auto d = static_cast<unsigned char>(s[pos + k]);
    if ((d & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (d & 0x3F);
  }
  const bool overlong = (n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000);
  if (overlong || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  return n + 1;
}

size_t utf8_invalid_at(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII runs are the common case: skip them a byte at a time without the decoder.
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t n = utf8_valid_length(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

Status check_utf8_text(std::string_view text, std::string_view source, std::string_view what) {
  const size_t at = utf8_invalid_at(text);
  if (at == std::string_view::npos) return ok_status();
  size_t line = 1, column = 1;
  for (size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return invalid_argument(source, ":", line, ":", column, ": ", what, " is not valid UTF-8 (byte ",
                          hex_byte(static_cast<unsigned char>(text[at])), ")");
}

Status check_utf8_value(std::string_view value, std::string_view what) {
  const size_t at = utf8_invalid_at(value);
  if (at == std::string_view::npos) return ok_status();
  return invalid_argument(what, " is not valid UTF-8 (byte ",
                          hex_byte(static_cast<unsigned char>(value[at])), " at offset ", at,
                          " of ", value.size(), ")");
}

}  // namespace qbc
