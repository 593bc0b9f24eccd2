#include "unicode.h"

#include <array>
#include <vector>

namespace qbc::tokenizer::tok {

size_t utf8_seq_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

size_t utf8_char_len(std::string_view s, size_t pos) {
  const size_t n = utf8_seq_len(static_cast<uint8_t>(s[pos]));
  if (n == 1 || pos + n > s.size()) return 1;
  for (size_t i = 1; i < n; ++i) {
    if ((static_cast<uint8_t>(s[pos + i]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

bool utf8_decode(std::string_view s, size_t& pos, uint32_t& cp) {
  if (pos >= s.size()) return false;
  const auto b0 = static_cast<uint8_t>(s[pos]);
  if (b0 < 0x80) {
    cp = b0;
    ++pos;
    return true;
  }
  size_t n = 0;
  uint32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2, min = 0x80, cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, min = 0x800, cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, min = 0x10000, cp = b0 & 0x07;
  } else {
    return false;
  }
  if (pos + n > s.size()) return false;
  for (size_t i = 1; i < n; ++i) {
    const auto b = static_cast<uint8_t>(s[pos + i]);
    if ((b & 0xC0) != 0x80) return false;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
  pos += n;
  return true;
}

void utf8_append(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves; the other 68
// bytes are assigned code points 256, 257, ... in byte order.
struct ByteMap {
  std::array<uint32_t, 256> cp{};
  std::array<std::string, 256> text;
  std::vector<int16_t> inverse;  // code point -> byte, -1 when unmapped

  ByteMap() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      cp[b] = printable ? static_cast<uint32_t>(b) : next++;
      utf8_append(cp[b], text[b]);
    }
    inverse.assign(next, -1);
    for (int b = 0; b < 256; ++b) inverse[cp[b]] = static_cast<int16_t>(b);
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

}  // namespace

const std::string& byte_to_unicode(uint8_t byte) { return byte_map().text[byte]; }

int unicode_to_byte(uint32_t cp) {
  const auto& inv = byte_map().inverse;
  return cp < inv.size() ? inv[cp] : -1;
}

std::string bytes_to_unicode_text(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() * 2);
  for (char c : raw) out += byte_to_unicode(static_cast<uint8_t>(c));
  return out;
}

std::string unicode_text_to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    uint32_t cp = 0;
    if (!utf8_decode(text, pos, cp)) {
      out.push_back(text[pos++]);
      continue;
    }
    const int b = unicode_to_byte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(text.substr(start, pos - start));
    }
  }
  return out;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  if (from.empty()) return std::string(s);
  out.reserve(s.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

}  // namespace qbc::tokenizer::tok
