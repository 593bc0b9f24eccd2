// The chat-template lexer: the inside of one {{ }} or {% %} tag cut into names, strings,
// integers and operators (chat_template_internal.h).
#include <cctype>
#include <cstdint>

#include "chat_template_internal.h"
#include "qbc/support/quote.h"

namespace qbc::tokenizer::chat {

std::string where(std::string_view text, size_t at) {
  size_t line = 1, col = 1;
  for (size_t k = 0; k < at && k < text.size(); ++k) {
    if (text[k] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return std::to_string(line) + ":" + std::to_string(col);
}

StatusOr<std::vector<Tok>> lex_tag(std::string_view text_, size_t begin, size_t end,
                                   const std::string& source_) {
  const auto error = [&](size_t at, const std::string& what) {
    return invalid_argument(source_, ":", where(text_, at), ": ", what);
  };
  std::vector<Tok> out;
  size_t k = begin;
  while (k < end) {
    const char c = text_[k];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++k;
      continue;
    }
    Tok t;
    t.at = k;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = k;
      while (e < end && (std::isalnum(static_cast<unsigned char>(text_[e])) || text_[e] == '_'))
        ++e;
      t.kind = Tok::kName;
      t.text = std::string(text_.substr(k, e - k));
      k = e;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t e = k;
      int64_t v = 0;
      while (e < end && std::isdigit(static_cast<unsigned char>(text_[e]))) {
        const int d = text_[e] - '0';
        if (v > (INT64_MAX - d) / 10) return error(k, "integer literal too large");
        v = v * 10 + d;
        ++e;
      }
      if (e < end && text_[e] == '.') return error(k, "float literals are not supported");
      t.kind = Tok::kInt;
      t.value = v;
      k = e;
    } else if (c == '\'' || c == '"') {
      size_t e = k + 1;
      std::string s;
      while (e < end && text_[e] != c) {
        if (text_[e] == '\\' && e + 1 < end) {
          const char n = text_[++e];
          s.push_back(n == 'n' ? '\n' : n == 't' ? '\t' : n == 'r' ? '\r' : n);
        } else {
          s.push_back(text_[e]);
        }
        ++e;
      }
      if (e >= end) return error(k, "unterminated string literal");
      t.kind = Tok::kString;
      t.text = std::move(s);
      k = e + 1;
    } else {
      static const char* two[] = {"==", "!=", "<=", ">=", "//"};
      t.kind = Tok::kOp;
      for (const char* op : two)
        if (text_.substr(k, 2) == op) t.text = op;
      if (t.text.empty()) {
        if (std::string_view("()[]{}.,:|+-*/%~<>=").find(c) == std::string_view::npos)
          return error(k, "unexpected character " + quote_prefix(std::string(1, c)));
        t.text = std::string(1, c);
      }
      k += t.text.size();
    }
    out.push_back(std::move(t));
  }
  Tok e;
  e.at = end;
  out.push_back(e);
  return out;
}

}  // namespace qbc::tokenizer::chat
