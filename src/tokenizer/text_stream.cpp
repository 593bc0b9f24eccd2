// Streaming detokenization (see qbc/tokenizer/text_stream.h).
#include "qbc/tokenizer/text_stream.h"

#include <algorithm>

namespace qbc::tokenizer {
namespace {

// True when `s` ends inside a UTF-8 character: a lead byte whose sequence is longer than
// the bytes after it. Stray continuation bytes (invalid UTF-8) are not waited for.
bool ends_in_partial_utf8(const std::string& s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= std::min<size_t>(n, 3); ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return len > back;
  }
  return false;
}

}  // namespace

TextStream::TextStream(Tokenizer tok, const std::vector<int32_t>& context) : tok_(std::move(tok)) {
  const size_t keep = std::min(context.size(), kContextIds);
  ids_.assign(context.end() - static_cast<std::ptrdiff_t>(keep), context.end());
  read_ = ids_.size();
}

std::string TextStream::decode_from(size_t begin, size_t end) const {
  return tok_.decode(ids_.data() + begin, end - begin);
}

std::string TextStream::push(int32_t id) {
  ids_.push_back(id);
  const std::string before = decode_from(prefix_, read_);
  const std::string text = decode_from(prefix_, ids_.size());
  if (text.size() <= before.size() || ends_in_partial_utf8(text)) return {};
  // Drop what is behind the new prefix, so each decode stays a few ids long.
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(read_));
  prefix_ = 0;
  read_ = ids_.size();
  return text.substr(before.size());
}

std::string TextStream::finish() {
  const std::string before = decode_from(prefix_, read_);
  const std::string text = decode_from(prefix_, ids_.size());
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(read_));
  prefix_ = 0;
  read_ = ids_.size();
  return text.size() > before.size() ? text.substr(before.size()) : std::string();
}

std::string decode_continuation(const Tokenizer& tok, const std::vector<int32_t>& context,
                                const std::vector<int32_t>& ids) {
  TextStream stream(tok, context);
  std::string out;
  for (int32_t id : ids) out += stream.push(id);
  return out + stream.finish();
}

}  // namespace qbc::tokenizer
