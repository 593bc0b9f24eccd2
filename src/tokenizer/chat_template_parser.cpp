// The chat-template parser: the text cut into segments (text, {{ }}, {% %}, {# #}) with
// Jinja's whitespace rules as HF configures them (trim_blocks: the newline after a block tag
// goes; lstrip_blocks: spaces and tabs before a block tag on its line go; "-" strips all
// whitespace on its side), each tag's tokens parsed by recursive descent into a tree
// (chat_template_internal.h).
#include <algorithm>
#include <cstdint>
#include <utility>

#include "chat_template_internal.h"
#include "qbc/support/quote.h"

namespace qbc::tokenizer::chat {
namespace {

class Parser {
 public:
  Parser(std::string_view text, std::string source) : text_(text), source_(std::move(source)) {}

  Status error(size_t at, const std::string& what) const {
    return invalid_argument(source_, ":", where(text_, at), ": ", what);
  }

  // Tokenizes the inside of one tag, [begin, end) (chat_template_lexer.cpp).
  StatusOr<std::vector<Tok>> lex(size_t begin, size_t end) const {
    return lex_tag(text_, begin, end, source_);
  }

  // ---- expressions over toks_ from pos_
  const Tok& peek(size_t ahead = 0) const {
    return toks_[std::min(pos_ + ahead, toks_.size() - 1)];
  }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == Tok::kOp && peek(ahead).text == op;
  }
  bool is_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).kind == Tok::kName && peek(ahead).text == name;
  }
  Status expect_op(const char* op) {
    if (!is_op(op)) return error(peek().at, std::string("expected '") + op + "'");
    ++pos_;
    return ok_status();
  }
  StatusOr<std::string> expect_name() {
    if (peek().kind != Tok::kName) return error(peek().at, "expected a name");
    return toks_[pos_++].text;
  }
  static ExprPtr make(Expr::Kind k, size_t at, std::string name = {}) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->at = at;
    e->name = std::move(name);
    return e;
  }

  // Counts the nesting of the recursive rules; deeper than kMaxDepth is an error.
  struct Nest {
    int& depth;
    explicit Nest(int& d) : depth(++d) {}
    ~Nest() { --depth; }
  };
  Status check_depth() const {
    if (depth_ > kMaxDepth)
      return error(peek().at, "nested deeper than " + std::to_string(kMaxDepth) + " levels");
    return ok_status();
  }

  StatusOr<ExprPtr> expression() {
    Nest nest(depth_);
    QBC_RETURN_IF_ERROR(check_depth());
    QBC_ASSIGN_OR_RETURN(ExprPtr a, or_expr());
    if (!is_name("if")) return a;
    const size_t at = peek().at;
    ++pos_;
    QBC_ASSIGN_OR_RETURN(ExprPtr c, or_expr());
    ExprPtr b;
    if (is_name("else")) {
      ++pos_;
      QBC_ASSIGN_OR_RETURN(b, expression());
    }
    ExprPtr t = make(Expr::kTernary, at);
    t->args.push_back(std::move(a));
    t->args.push_back(std::move(c));
    t->args.push_back(std::move(b));
    return t;
  }
  StatusOr<ExprPtr> binary_chain(StatusOr<ExprPtr> (Parser::*next)(),
                                 std::initializer_list<const char*> ops, bool names) {
    QBC_ASSIGN_OR_RETURN(ExprPtr a, (this->*next)());
    for (;;) {
      const char* hit = nullptr;
      for (const char* op : ops)
        if (names ? is_name(op) : is_op(op)) hit = op;
      if (hit == nullptr) return a;
      const size_t at = peek().at;
      ++pos_;
      QBC_ASSIGN_OR_RETURN(ExprPtr b, (this->*next)());
      ExprPtr e = make(Expr::kBinary, at, hit);
      e->args.push_back(std::move(a));
      e->args.push_back(std::move(b));
      a = std::move(e);
    }
  }
  StatusOr<ExprPtr> or_expr() { return binary_chain(&Parser::and_expr, {"or"}, true); }
  StatusOr<ExprPtr> and_expr() { return binary_chain(&Parser::not_expr, {"and"}, true); }
  StatusOr<ExprPtr> not_expr() {
    if (!is_name("not")) return comparison();
    Nest nest(depth_);
    QBC_RETURN_IF_ERROR(check_depth());
    const size_t at = peek().at;
    ++pos_;
    QBC_ASSIGN_OR_RETURN(ExprPtr a, not_expr());
    ExprPtr e = make(Expr::kUnary, at, "not");
    e->args.push_back(std::move(a));
    return e;
  }
  StatusOr<ExprPtr> comparison() {
    QBC_ASSIGN_OR_RETURN(ExprPtr a, additive());
    for (;;) {
      const size_t at = peek().at;
      std::string op;
      for (const char* o : {"==", "!=", "<", ">", "<=", ">="})
        if (is_op(o)) op = o;
      if (op.empty() && is_name("in")) op = "in";
      if (op.empty() && is_name("not") && is_name("in", 1)) op = "not in";
      if (is_name("is")) {
        ++pos_;
        std::string test;
        if (is_name("not")) {
          ++pos_;
          test = "not ";
        }
        QBC_ASSIGN_OR_RETURN(std::string name, expect_name());
        ExprPtr e = make(Expr::kTest, at, test + name);
        e->args.push_back(std::move(a));
        a = std::move(e);
        continue;
      }
      if (op.empty()) return a;
      pos_ += op == "not in" ? 2 : 1;
      QBC_ASSIGN_OR_RETURN(ExprPtr b, additive());
      ExprPtr e = make(Expr::kBinary, at, op);
      e->args.push_back(std::move(a));
      e->args.push_back(std::move(b));
      a = std::move(e);
    }
  }
  // Jinja's precedence: + - bind weaker than ~, which binds weaker than * / %.
  StatusOr<ExprPtr> additive() { return binary_chain(&Parser::concat, {"+", "-"}, false); }
  StatusOr<ExprPtr> concat() { return binary_chain(&Parser::multiplicative, {"~"}, false); }
  StatusOr<ExprPtr> multiplicative() {
    return binary_chain(&Parser::unary, {"*", "//", "/", "%"}, false);
  }
  StatusOr<ExprPtr> unary() {
    if (!is_op("-")) return postfix();
    Nest nest(depth_);
    QBC_RETURN_IF_ERROR(check_depth());
    const size_t at = peek().at;
    ++pos_;
    QBC_ASSIGN_OR_RETURN(ExprPtr a, unary());
    ExprPtr e = make(Expr::kUnary, at, "-");
    e->args.push_back(std::move(a));
    return e;
  }
  Status call_args(Expr& e, bool keywords = false) {
    QBC_RETURN_IF_ERROR(expect_op("("));
    while (!is_op(")")) {
      if (keywords) {  // namespace(name=expr, ...)
        const size_t at = peek().at;
        if (peek().kind != Tok::kName)
          return error(at, "namespace() takes keyword arguments (name=value)");
        std::string key = peek().text;
        ++pos_;
        if (!is_op("=")) return error(at, "namespace() takes keyword arguments (name=value)");
        ++pos_;
        e.keywords.push_back(std::move(key));
      }
      QBC_ASSIGN_OR_RETURN(ExprPtr a, expression());
      e.args.push_back(std::move(a));
      if (!is_op(")")) QBC_RETURN_IF_ERROR(expect_op(","));
    }
    ++pos_;
    return ok_status();
  }
  StatusOr<ExprPtr> postfix() {
    QBC_ASSIGN_OR_RETURN(ExprPtr a, primary());
    for (;;) {
      const size_t at = peek().at;
      if (is_op(".")) {
        ++pos_;
        QBC_ASSIGN_OR_RETURN(std::string name, expect_name());
        ExprPtr e = make(Expr::kAttr, at, name);
        e->args.push_back(std::move(a));
        a = std::move(e);
      } else if (is_op("[")) {
        ++pos_;
        ExprPtr lo, hi;
        if (!is_op(":")) {
          QBC_ASSIGN_OR_RETURN(lo, expression());
        }
        if (is_op(":")) {
          ++pos_;
          if (!is_op("]")) {
            QBC_ASSIGN_OR_RETURN(hi, expression());
          }
          ExprPtr e = make(Expr::kSlice, at);
          e->args.push_back(std::move(a));
          e->args.push_back(std::move(lo));
          e->args.push_back(std::move(hi));
          a = std::move(e);
        } else {
          ExprPtr e = make(Expr::kIndex, at);
          e->args.push_back(std::move(a));
          e->args.push_back(std::move(lo));
          a = std::move(e);
        }
        QBC_RETURN_IF_ERROR(expect_op("]"));
      } else if (is_op("(")) {
        const bool ns = a->kind == Expr::kName && a->name == "namespace";
        if (a->kind != Expr::kAttr && !ns &&
            !(a->kind == Expr::kName && a->name == "raise_exception"))
          return error(at, "only methods, namespace() and raise_exception() can be called");
        ExprPtr e = make(Expr::kCall, at);
        e->args.push_back(std::move(a));
        QBC_RETURN_IF_ERROR(call_args(*e, ns));
        a = std::move(e);
      } else if (is_op("|")) {
        ++pos_;
        QBC_ASSIGN_OR_RETURN(std::string name, expect_name());
        static const char* known[] = {"trim",   "length",  "count",  "upper",      "lower",
                                      "string", "default", "tojson", "selectattr", "capitalize"};
        if (std::find_if(std::begin(known), std::end(known),
                         [&](const char* k) { return name == k; }) == std::end(known))
          return error(at, "filter " + quote_prefix(name) + " is not supported");
        ExprPtr e = make(Expr::kFilter, at, name);
        e->args.push_back(std::move(a));
        if (is_op("(")) QBC_RETURN_IF_ERROR(call_args(*e));
        a = std::move(e);
      } else {
        return a;
      }
    }
  }
  StatusOr<ExprPtr> primary() {
    const Tok& t = peek();
    if (t.kind == Tok::kString || t.kind == Tok::kInt) {
      ExprPtr e = make(Expr::kLiteral, t.at);
      e->literal = t.kind == Tok::kString ? Value::string(t.text) : Value::integer(t.value);
      ++pos_;
      return e;
    }
    if (t.kind == Tok::kName) {
      ExprPtr e = make(Expr::kLiteral, t.at);
      if (t.text == "true" || t.text == "True") {
        e->literal = Value::boolean(true);
      } else if (t.text == "false" || t.text == "False") {
        e->literal = Value::boolean(false);
      } else if (t.text == "none" || t.text == "None") {
        e->literal = Value::none();
      } else {
        e = make(Expr::kName, t.at, t.text);
      }
      ++pos_;
      return e;
    }
    if (is_op("(")) {
      ++pos_;
      QBC_ASSIGN_OR_RETURN(ExprPtr e, expression());
      QBC_RETURN_IF_ERROR(expect_op(")"));
      return e;
    }
    if (is_op("[") || is_op("{")) {
      const bool map = is_op("{");
      ExprPtr e = make(map ? Expr::kMap : Expr::kList, t.at);
      ++pos_;
      const char* close = map ? "}" : "]";
      while (!is_op(close)) {
        QBC_ASSIGN_OR_RETURN(ExprPtr a, expression());
        e->args.push_back(std::move(a));
        if (map) {
          QBC_RETURN_IF_ERROR(expect_op(":"));
          QBC_ASSIGN_OR_RETURN(ExprPtr v, expression());
          e->args.push_back(std::move(v));
        }
        if (!is_op(close)) QBC_RETURN_IF_ERROR(expect_op(","));
      }
      ++pos_;
      return e;
    }
    return error(t.at, t.kind == Tok::kEnd ? "expected an expression" : "unexpected token");
  }

  Status expect_end() {
    if (peek().kind != Tok::kEnd) return error(peek().at, "unexpected token at the end of the tag");
    return ok_status();
  }

  // ---- segments and statements
  struct Segment {
    enum Kind { kText, kExpr, kStmt } kind;
    size_t begin, end;  // inside of the tag, or the text
    std::string text;   // kText after whitespace control
  };

  StatusOr<std::vector<Segment>> segments() const {
    std::vector<Segment> out;
    const char* ws = " \t\r\n";
    size_t k = 0;
    bool strip_next = false;    // "-" on the previous tag's right
    bool trim_newline = false;  // trim_blocks: the previous tag was a block or a comment
    for (;;) {
      size_t open = text_.find('{', k);
      while (open != std::string_view::npos &&
             (open + 1 >= text_.size() ||
              std::string_view("{%#").find(text_[open + 1]) == std::string_view::npos))
        open = open + 1 >= text_.size() ? std::string_view::npos : text_.find('{', open + 1);
      const size_t stop = open == std::string_view::npos ? text_.size() : open;
      std::string piece(text_.substr(k, stop - k));
      if (strip_next) {
        const size_t first = piece.find_first_not_of(ws);
        piece.erase(0, first == std::string::npos ? piece.size() : first);
      } else if (trim_newline && !piece.empty() && piece[0] == '\n') {
        piece.erase(0, 1);
      }
      if (open == std::string_view::npos) {
        if (!piece.empty()) out.push_back({Segment::kText, k, stop, piece});
        return out;
      }
      const char kind = text_[open + 1];
      const char mark = open + 2 < text_.size() ? text_[open + 2] : 0;
      if (mark == '-') {
        const size_t last = piece.find_last_not_of(ws);
        piece.erase(last == std::string::npos ? 0 : last + 1);
      } else if (kind != '{' && mark != '+') {
        // lstrip_blocks: only spaces and tabs between the line's start and a block tag.
        const size_t nl = text_.rfind('\n', open == 0 ? 0 : open - 1);
        const size_t line = nl == std::string_view::npos || nl >= open ? 0 : nl + 1;
        if (line >= k &&
            text_.substr(line, open - line).find_first_not_of(" \t") == std::string_view::npos) {
          const size_t keep = piece.find_last_not_of(" \t");
          piece.erase(keep == std::string::npos ? 0 : keep + 1);
        }
      }
      if (!piece.empty()) out.push_back({Segment::kText, k, open, piece});
      const size_t inner = open + 2 + (mark == '-' || mark == '+' ? 1 : 0);
      const char close0 = kind == '{' ? '}' : kind;
      size_t end = inner;
      char quote = 0;
      bool found = false;
      for (; end + 1 < text_.size(); ++end) {
        const char c = text_[end];
        if (quote != 0) {
          if (c == '\\')
            ++end;
          else if (c == quote)
            quote = 0;
        } else if (kind != '#' && (c == '\'' || c == '"')) {
          quote = c;
        } else if (c == close0 && text_[end + 1] == '}') {
          found = true;
          break;
        }
      }
      if (!found) return error(open, std::string("unterminated tag (no ") + close0 + "})");
      size_t inner_end = end;
      const bool strip_right = inner_end > inner && text_[inner_end - 1] == '-';
      if (strip_right) --inner_end;
      if (kind == '{') out.push_back({Segment::kExpr, inner, inner_end, {}});
      if (kind == '%') out.push_back({Segment::kStmt, inner, inner_end, {}});
      strip_next = strip_right;
      trim_newline = kind != '{';
      k = end + 2;
    }
  }

  // Parses segments [seg_, ...) into `body` until a statement named in `ends`; returns its
  // keyword ("" at the end of the template) with toks_ positioned after it.
  StatusOr<std::string> body(const std::vector<Segment>& segs, Body& out,
                             std::initializer_list<const char*> ends) {
    Nest nest(block_depth_);
    if (block_depth_ > kMaxDepth)
      return error(seg_ > 0 ? segs[seg_ - 1].begin : 0,
                   "blocks nested deeper than " + std::to_string(kMaxDepth) + " levels");
    while (seg_ < segs.size()) {
      const Segment& s = segs[seg_++];
      if (s.kind == Segment::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::kText;
        n->text = s.text;
        n->at = s.begin;
        out.push_back(std::move(n));
        continue;
      }
      QBC_ASSIGN_OR_RETURN(toks_, lex(s.begin, s.end));
      pos_ = 0;
      if (s.kind == Segment::kExpr) {
        auto n = std::make_unique<Node>();
        n->kind = Node::kOutput;
        n->at = s.begin;
        QBC_ASSIGN_OR_RETURN(n->expr, expression());
        QBC_RETURN_IF_ERROR(expect_end());
        out.push_back(std::move(n));
        continue;
      }
      QBC_ASSIGN_OR_RETURN(const std::string kw, expect_name());
      for (const char* e : ends)
        if (kw == e) return kw;
      auto n = std::make_unique<Node>();
      n->at = s.begin;
      if (kw == "if") {
        n->kind = Node::kIf;
        std::string next = "elif";
        while (next == "elif") {
          QBC_ASSIGN_OR_RETURN(ExprPtr c, expression());
          QBC_RETURN_IF_ERROR(expect_end());
          n->conditions.push_back(std::move(c));
          n->bodies.emplace_back();
          QBC_ASSIGN_OR_RETURN(next, body(segs, n->bodies.back(), {"elif", "else", "endif"}));
        }
        if (next == "else") {
          QBC_RETURN_IF_ERROR(expect_end());
          n->bodies.emplace_back();
          QBC_ASSIGN_OR_RETURN(next, body(segs, n->bodies.back(), {"endif"}));
        }
        if (next != "endif") return error(s.begin, "{% if %} without {% endif %}");
        QBC_RETURN_IF_ERROR(expect_end());
      } else if (kw == "for") {
        n->kind = Node::kFor;
        for (;;) {
          QBC_ASSIGN_OR_RETURN(std::string v, expect_name());
          n->names.push_back(std::move(v));
          if (!is_op(",")) break;
          ++pos_;
        }
        if (!is_name("in")) return error(peek().at, "expected 'in'");
        ++pos_;
        QBC_ASSIGN_OR_RETURN(n->expr, or_expr());
        if (is_name("if") || is_name("recursive"))
          return error(peek().at, "loop filters and recursive loops are not supported");
        QBC_RETURN_IF_ERROR(expect_end());
        n->bodies.emplace_back();
        QBC_ASSIGN_OR_RETURN(std::string next, body(segs, n->bodies.back(), {"else", "endfor"}));
        if (next == "else") {
          QBC_RETURN_IF_ERROR(expect_end());
          n->bodies.emplace_back();
          QBC_ASSIGN_OR_RETURN(next, body(segs, n->bodies.back(), {"endfor"}));
        }
        if (next != "endfor") return error(s.begin, "{% for %} without {% endfor %}");
        QBC_RETURN_IF_ERROR(expect_end());
      } else if (kw == "generation") {
        // HF's {% generation %} marks assistant text for its masks; it renders its body.
        QBC_RETURN_IF_ERROR(expect_end());
        n->kind = Node::kIf;
        ExprPtr yes = make(Expr::kLiteral, s.begin);
        yes->literal = Value::boolean(true);
        n->conditions.push_back(std::move(yes));
        n->bodies.emplace_back();
        QBC_ASSIGN_OR_RETURN(std::string next, body(segs, n->bodies.back(), {"endgeneration"}));
        if (next != "endgeneration")
          return error(s.begin, "{% generation %} without {% endgeneration %}");
        QBC_RETURN_IF_ERROR(expect_end());
      } else if (kw == "set") {
        n->kind = Node::kSet;
        QBC_ASSIGN_OR_RETURN(std::string v, expect_name());
        n->names.push_back(std::move(v));
        if (is_op(".")) {  // {% set ns.attr = expr %}
          ++pos_;
          QBC_ASSIGN_OR_RETURN(std::string attr, expect_name());
          n->names.push_back(std::move(attr));
        }
        QBC_RETURN_IF_ERROR(expect_op("="));
        QBC_ASSIGN_OR_RETURN(n->expr, expression());
        QBC_RETURN_IF_ERROR(expect_end());
      } else {
        return error(toks_[0].at,
                     "{% " + kw + " %} is not supported (docs/runtime.md lists the subset)");
      }
      out.push_back(std::move(n));
    }
    return std::string();
  }

  StatusOr<Body> parse_all() {
    QBC_ASSIGN_OR_RETURN(const std::vector<Segment> segs, segments());
    Body out;
    seg_ = 0;
    QBC_ASSIGN_OR_RETURN(const std::string end,
                         body(segs, out, {"elif", "else", "endif", "endfor", "endgeneration"}));
    if (!end.empty())
      return error(segs[seg_ - 1].begin, "{% " + end + " %} without its opening tag");
    return out;
  }

 private:
  std::string_view text_;
  std::string source_;
  std::vector<Tok> toks_;
  size_t pos_ = 0;
  size_t seg_ = 0;
  int depth_ = 0;
  int block_depth_ = 0;
};

}  // namespace

StatusOr<Body> parse_template(std::string_view text, const std::string& source) {
  Parser p(text, source);
  return p.parse_all();
}

}  // namespace qbc::tokenizer::chat
