// parse_text: reads the MBLT text form back (grammar in docs/ir.md).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <nlohmann/json.hpp>

#include "qbc/ir/text.h"
#include "qbc/ir/verifier.h"
#include "qbc/support/quote.h"
#include "qbc/support/utf8.h"

namespace qbc::ir {
namespace {

struct Token {
  enum Kind { kWord, kValue, kWeight, kString, kNumber, kPunct, kEnd } kind = kEnd;
  std::string text;  // strings: unescaped contents
  int line = 0, col = 0;
};

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == '+';
}

class Lexer {
 public:
  Lexer(const std::string& text, std::string label) : s_(text), label_(std::move(label)) {}

  Status next(Token* t) {
    skip_space();
    t->line = line_;
    t->col = col_;
    t->text.clear();
    if (i_ >= s_.size()) {
      t->kind = Token::kEnd;
      return ok_status();
    }
    const char c = s_[i_];
    if (c == '\n') {
      t->kind = Token::kPunct;
      t->text = "\n";
      advance();
      return ok_status();
    }
    if (c == '"') return string_token(t);
    if (c == '%' || c == '@') {
      advance();
      t->kind = c == '%' ? Token::kValue : Token::kWeight;
      while (i_ < s_.size() && name_char(s_[i_])) t->text += advance();
      if (t->text.empty()) return error(*t, std::string("expected a name after '") + c + "'");
      return ok_status();
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '-') {
      t->kind = Token::kNumber;
      while (i_ < s_.size() && name_char(s_[i_])) t->text += advance();
      return ok_status();
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      t->kind = Token::kWord;
      while (i_ < s_.size() && name_char(s_[i_])) t->text += advance();
      return ok_status();
    }
    if (std::string("(){}[],:=?").find(c) != std::string::npos) {
      t->kind = Token::kPunct;
      t->text = std::string(1, advance());
      return ok_status();
    }
    return error(*t, std::string("unexpected character '") + c + "'");
  }

  Status error(const Token& t, const std::string& msg) const {
    return invalid_argument(label_, ":", t.line, ":", t.col, ": ", msg);
  }

 private:
  char advance() {
    const char c = s_[i_++];
    if (c == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    return c;
  }
  void skip_space() {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t' || c == '\r') {
        advance();
      } else if (c == '#') {  // comment to end of line
        while (i_ < s_.size() && s_[i_] != '\n') advance();
      } else {
        break;
      }
    }
  }
  Status string_token(Token* t) {
    const size_t start = i_;
    advance();
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\n') return error(*t, "unterminated string");
      if (s_[i_] == '\\' && i_ + 1 < s_.size()) advance();
      advance();
    }
    if (i_ >= s_.size()) return error(*t, "unterminated string");
    advance();
    nlohmann::json j = nlohmann::json::parse(s_.substr(start, i_ - start), nullptr, false);
    if (!j.is_string()) return error(*t, "malformed string literal");
    t->kind = Token::kString;
    t->text = j.get<std::string>();
    return ok_status();
  }

  const std::string& s_;
  std::string label_;
  size_t i_ = 0;
  int line_ = 1, col_ = 1;
};

class Parser {
 public:
  Parser(const std::string& text, const std::string& label) : lex_(text, label) {}

  StatusOr<Graph> parse() {
    QBC_RETURN_IF_ERROR(bump());
    QBC_RETURN_IF_ERROR(expect_word("mblt"));
    QBC_ASSIGN_OR_RETURN(int64_t version, integer());
    if (version != 1) return lex_.error(tok_, "unsupported MBLT text version " + std::to_string(version));
    QBC_RETURN_IF_ERROR(end_line());
    Graph g;
    while (tok_.kind != Token::kEnd) {
      if (is_punct("\n")) {
        QBC_RETURN_IF_ERROR(bump());
        continue;
      }
      if (tok_.kind == Token::kValue) {
        QBC_RETURN_IF_ERROR(node(g));
      } else if (tok_.kind == Token::kWord) {
        const std::string kw = tok_.text;
        QBC_RETURN_IF_ERROR(bump());
        if (kw == "graph") {
          if (tok_.kind != Token::kWeight) return lex_.error(tok_, "expected @name after 'graph'");
          g.set_name(tok_.text);
          QBC_RETURN_IF_ERROR(bump());
        } else if (kw == "source") {
          QBC_ASSIGN_OR_RETURN(g.source_path, string());
          QBC_RETURN_IF_ERROR(expect_word("format"));
          QBC_ASSIGN_OR_RETURN(g.source_format, string());
        } else if (kw == "file") {
          SourceFile f;
          QBC_ASSIGN_OR_RETURN(f.path, string());
          QBC_RETURN_IF_ERROR(expect_word("size"));
          QBC_ASSIGN_OR_RETURN(int64_t size, integer());
          f.size = static_cast<uint64_t>(size);
          QBC_RETURN_IF_ERROR(expect_word("xxh3"));
          QBC_ASSIGN_OR_RETURN(f.xxh3_128, string());
          g.files.push_back(std::move(f));
        } else if (kw == "meta") {
          QBC_ASSIGN_OR_RETURN(std::string k, string());
          QBC_ASSIGN_OR_RETURN(std::string v, string());
          g.metadata[k] = v;
        } else if (kw == "weight") {
          QBC_RETURN_IF_ERROR(weight(g));
        } else if (kw == "return") {
          QBC_RETURN_IF_ERROR(outputs(g));
        } else {
          return lex_.error(tok_, "unknown declaration " + quote_prefix(kw));
        }
      } else {
        return lex_.error(tok_, "expected a declaration or a node");
      }
      QBC_RETURN_IF_ERROR(end_line());
    }
    QBC_RETURN_IF_ERROR(verify(g));
    return g;
  }

 private:
  Status bump() { return lex_.next(&tok_); }
  bool is_punct(const char* p) const { return tok_.kind == Token::kPunct && tok_.text == p; }
  Status expect_punct(const char* p) {
    if (!is_punct(p)) return lex_.error(tok_, std::string("expected '") + p + "'");
    return bump();
  }
  Status expect_word(const char* w) {
    if (tok_.kind != Token::kWord || tok_.text != w) return lex_.error(tok_, std::string("expected '") + w + "'");
    return bump();
  }
  Status end_line() {
    if (tok_.kind == Token::kEnd) return ok_status();
    if (!is_punct("\n")) return lex_.error(tok_, "expected end of line, got " + quote_prefix(tok_.text));
    return bump();
  }
  StatusOr<std::string> string() {
    if (tok_.kind != Token::kString) return lex_.error(tok_, "expected a quoted string");
    std::string s = tok_.text;
    QBC_RETURN_IF_ERROR(bump());
    return s;
  }
  StatusOr<int64_t> integer() {
    int64_t v = 0;
    const std::string& t = tok_.text;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (tok_.kind != Token::kNumber || ec != std::errc() || end != t.data() + t.size()) {
      return lex_.error(tok_, "expected an integer, got " + quote_prefix(t));
    }
    QBC_RETURN_IF_ERROR(bump());
    return v;
  }
  StatusOr<double> number() {
    double v = 0;
    const std::string& t = tok_.text;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (tok_.kind != Token::kNumber || ec != std::errc() || end != t.data() + t.size()) {
      return lex_.error(tok_, "expected a number, got " + quote_prefix(t));
    }
    QBC_RETURN_IF_ERROR(bump());
    return v;
  }

  StatusOr<TensorType> type() {
    TensorType t;
    if (tok_.kind != Token::kWord) return lex_.error(tok_, "expected a type such as f32[?,64]");
    auto d = dtype_from_name(tok_.text);
    if (!d) return lex_.error(tok_, "unknown element type " + quote_prefix(tok_.text));
    t.dtype = *d;
    QBC_RETURN_IF_ERROR(bump());
    QBC_RETURN_IF_ERROR(expect_punct("["));
    int64_t count = 1;  // of the static dimensions; must fit, as in the protobuf form
    while (!is_punct("]")) {
      if (!t.dims.empty()) QBC_RETURN_IF_ERROR(expect_punct(","));
      if (is_punct("?")) {
        t.dims.push_back(kDynamic);
        QBC_RETURN_IF_ERROR(bump());
      } else {
        QBC_ASSIGN_OR_RETURN(int64_t dim, integer());
        if (dim < 0) return lex_.error(tok_, "negative dimension");
        if (dim > 0 && __builtin_mul_overflow(count, dim, &count)) {
          return lex_.error(tok_, "dimensions overflow the element count");
        }
        t.dims.push_back(dim);
      }
    }
    QBC_RETURN_IF_ERROR(bump());
    return t;
  }

  Status weight(Graph& g) {
    Weight w;
    if (tok_.kind != Token::kWeight) return lex_.error(tok_, "expected @name");
    w.name = tok_.text;
    if (g.find_weight(w.name)) return lex_.error(tok_, "weight " + quote_prefix("@" + w.name) + " declared twice");
    QBC_RETURN_IF_ERROR(bump());
    QBC_RETURN_IF_ERROR(expect_punct(":"));
    QBC_ASSIGN_OR_RETURN(w.type, type());
    QBC_RETURN_IF_ERROR(expect_punct("="));
    if (tok_.kind == Token::kWord && (tok_.text == "model" || tok_.text == "sidecar")) {
      w.source = tok_.text == "model" ? WeightSource::kModel : WeightSource::kSidecar;
      QBC_RETURN_IF_ERROR(bump());
    } else {
      return lex_.error(tok_, "expected 'model' or 'sidecar'");
    }
    QBC_ASSIGN_OR_RETURN(w.tensor, string());
    if (tok_.kind == Token::kWord && tok_.text == "host") {
      w.role = WeightRole::kHostEmbedding;
      QBC_RETURN_IF_ERROR(bump());
    }
    g.add_weight(std::move(w));
    return ok_status();
  }

  // One attribute value, typed by the op's schema when it names the attribute.
  StatusOr<AttrValue> attr_value(const AttrSpec* spec) {
    if (tok_.kind == Token::kString) {
      QBC_ASSIGN_OR_RETURN(std::string s, string());
      return AttrValue(s);
    }
    if (is_punct("[")) {
      QBC_RETURN_IF_ERROR(bump());
      std::vector<std::string> items;
      while (!is_punct("]")) {
        if (!items.empty()) QBC_RETURN_IF_ERROR(expect_punct(","));
        if (tok_.kind != Token::kNumber) return lex_.error(tok_, "expected a number in list");
        items.push_back(tok_.text);
        QBC_RETURN_IF_ERROR(bump());
      }
      QBC_RETURN_IF_ERROR(bump());
      const bool floats = spec ? spec->kind == AttrKind::kFloats
                               : std::any_of(items.begin(), items.end(), [](const std::string& s) {
                                   return s.find_first_of(".eEn") != std::string::npos;
                                 });
      if (floats) {
        std::vector<double> out;
        for (const std::string& s : items) out.push_back(std::strtod(s.c_str(), nullptr));
        return AttrValue(out);
      }
      std::vector<int64_t> out;
      for (const std::string& s : items) out.push_back(std::strtoll(s.c_str(), nullptr, 10));
      return AttrValue(out);
    }
    if (tok_.kind != Token::kNumber) return lex_.error(tok_, "expected an attribute value");
    const bool is_float = spec ? spec->kind == AttrKind::kFloat
                               : tok_.text.find_first_of(".eEn") != std::string::npos;
    if (is_float) {
      QBC_ASSIGN_OR_RETURN(double v, number());
      return AttrValue(v);
    }
    QBC_ASSIGN_OR_RETURN(int64_t v, integer());
    return AttrValue(v);
  }

  Status node(Graph& g) {
    Node n;
    n.name = tok_.text;
    if (g.find(n.name) >= 0) return lex_.error(tok_, "value " + quote_prefix("%" + n.name) + " defined twice");
    QBC_RETURN_IF_ERROR(bump());
    QBC_RETURN_IF_ERROR(expect_punct("="));
    if (tok_.kind != Token::kWord) return lex_.error(tok_, "expected an op name");
    auto op = op_from_name(tok_.text);
    if (!op) return lex_.error(tok_, "unknown op " + quote_prefix(tok_.text));
    n.op = *op;
    QBC_RETURN_IF_ERROR(bump());
    QBC_RETURN_IF_ERROR(expect_punct("("));
    while (!is_punct(")")) {
      if (!n.operands.empty()) QBC_RETURN_IF_ERROR(expect_punct(","));
      if (tok_.kind == Token::kWeight) {
        n.operands.push_back(Operand::of_weight(tok_.text));
      } else if (tok_.kind == Token::kValue) {
        const ValueId v = g.find(tok_.text);
        if (v < 0) return lex_.error(tok_, quote_prefix("%" + tok_.text) + " is not defined before this use");
        n.operands.push_back(Operand::of(v));
      } else {
        return lex_.error(tok_, "expected %value or @weight");
      }
      QBC_RETURN_IF_ERROR(bump());
    }
    QBC_RETURN_IF_ERROR(bump());
    if (is_punct("{")) {
      QBC_RETURN_IF_ERROR(bump());
      while (!is_punct("}")) {
        if (!n.attrs.all().empty()) QBC_RETURN_IF_ERROR(expect_punct(","));
        if (tok_.kind != Token::kWord) return lex_.error(tok_, "expected an attribute name");
        const std::string key = tok_.text;
        const AttrSpec* spec = nullptr;
        for (const AttrSpec& s : op_info(n.op).attrs) {
          if (key == s.name) spec = &s;
        }
        QBC_RETURN_IF_ERROR(bump());
        QBC_RETURN_IF_ERROR(expect_punct("="));
        QBC_ASSIGN_OR_RETURN(AttrValue v, attr_value(spec));
        n.attrs.set(key, std::move(v));
      }
      QBC_RETURN_IF_ERROR(bump());
    }
    QBC_RETURN_IF_ERROR(expect_punct(":"));
    QBC_ASSIGN_OR_RETURN(n.type, type());
    while (tok_.kind == Token::kWord) {
      const std::string kw = tok_.text;
      QBC_RETURN_IF_ERROR(bump());
      if (kw == "block") {
        QBC_ASSIGN_OR_RETURN(int64_t b, integer());
        n.block = static_cast<int>(b);
      } else if (kw == "head") {
        n.part = Part::kHead;
      } else if (kw == "from") {
        QBC_ASSIGN_OR_RETURN(n.origin, string());
      } else {
        return lex_.error(tok_, "unexpected " + quote_prefix(kw) + " after the node type");
      }
    }
    g.append(std::move(n));
    return ok_status();
  }

  Status outputs(Graph& g) {
    while (tok_.kind == Token::kValue) {
      const ValueId v = g.find(tok_.text);
      if (v < 0) return lex_.error(tok_, "returned value " + quote_prefix("%" + tok_.text) + " is not defined");
      g.add_output(v);
      QBC_RETURN_IF_ERROR(bump());
      if (!is_punct(",")) break;
      QBC_RETURN_IF_ERROR(bump());
    }
    return ok_status();
  }

  Lexer lex_;
  Token tok_;
};

}  // namespace

StatusOr<Graph> parse_text(const std::string& text, const std::string& label) {
  // Names and strings go into the MBLT protobuf and JSON dumps, both UTF-8 only.
  QBC_RETURN_IF_ERROR(check_utf8_text(text, label, "the text"));
  Parser p(text, label);
  return p.parse();
}

}  // namespace qbc::ir
