// Chat templates: the Jinja subset of qbc/tokenizer/chat_template.h.
//
// parse(): the text is cut into segments (text, {{ }}, {% %}, {# #}) with Jinja's whitespace
// rules as HF configures them (trim_blocks: the newline after a block tag goes; lstrip_blocks:
// spaces and tabs before a block tag on its line go; "-" strips all whitespace on its side),
// each tag is tokenized and parsed by recursive descent into a tree; render() walks it.
#include "qbc/tokenizer/chat_template.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <map>
#include <utility>

#include "qbc/support/quote.h"

namespace qbc::tokenizer {
namespace {

// ---------------------------------------------------------------------------------- values

struct Value {
  enum Kind { kUndefined, kNone, kBool, kInt, kString, kList, kMap } kind = kUndefined;
  bool b = false;
  int64_t i = 0;
  std::string s;
  std::shared_ptr<std::vector<Value>> list;
  std::shared_ptr<std::vector<std::pair<std::string, Value>>> map;

  static Value none() { return with(kNone); }
  static Value boolean(bool v) {
    Value x = with(kBool);
    x.b = v;
    return x;
  }
  static Value integer(int64_t v) {
    Value x = with(kInt);
    x.i = v;
    return x;
  }
  static Value string(std::string v) {
    Value x = with(kString);
    x.s = std::move(v);
    return x;
  }
  static Value new_list() {
    Value x = with(kList);
    x.list = std::make_shared<std::vector<Value>>();
    return x;
  }
  static Value new_map() {
    Value x = with(kMap);
    x.map = std::make_shared<std::vector<std::pair<std::string, Value>>>();
    return x;
  }
  static Value with(Kind k) {
    Value x;
    x.kind = k;
    return x;
  }
  const Value* find(const std::string& key) const {
    if (kind != kMap) return nullptr;
    for (const auto& [k, v] : *map)
      if (k == key) return &v;
    return nullptr;
  }
  void set(const std::string& key, Value v) {
    for (auto& [k, old] : *map)
      if (k == key) {
        old = std::move(v);
        return;
      }
    map->emplace_back(key, std::move(v));
  }
};

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined:
    case Value::kNone:
      return false;
    case Value::kBool:
      return v.b;
    case Value::kInt:
      return v.i != 0;
    case Value::kString:
      return !v.s.empty();
    case Value::kList:
      return !v.list->empty();
    case Value::kMap:
      return !v.map->empty();
  }
  return false;
}

std::string json_of(const Value& v);

std::string text_of(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined:
      return "";
    case Value::kNone:
      return "None";
    case Value::kBool:
      return v.b ? "True" : "False";
    case Value::kInt:
      return std::to_string(v.i);
    case Value::kString:
      return v.s;
    case Value::kList:
    case Value::kMap:
      return json_of(v);
  }
  return "";
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          static const char* hex = "0123456789abcdef";
          out += "\\u00";
          out.push_back(hex[c >> 4]);
          out.push_back(hex[c & 15]);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  return out + "\"";
}

std::string json_of(const Value& v) {
  switch (v.kind) {
    case Value::kUndefined:
    case Value::kNone:
      return "null";
    case Value::kBool:
      return v.b ? "true" : "false";
    case Value::kInt:
      return std::to_string(v.i);
    case Value::kString:
      return json_string(v.s);
    case Value::kList: {
      std::string out = "[";
      for (size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + json_of((*v.list)[k]);
      return out + "]";
    }
    case Value::kMap: {
      std::string out = "{";
      for (size_t k = 0; k < v.map->size(); ++k)
        out +=
            (k ? ", " : "") + json_string((*v.map)[k].first) + ": " + json_of((*v.map)[k].second);
      return out + "}";
    }
  }
  return "null";
}

bool equal(const Value& a, const Value& b) {
  const bool an = a.kind == Value::kInt || a.kind == Value::kBool;
  const bool bn = b.kind == Value::kInt || b.kind == Value::kBool;
  if (an && bn) return (a.kind == Value::kBool ? a.b : a.i) == (b.kind == Value::kBool ? b.b : b.i);
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::kString:
      return a.s == b.s;
    case Value::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case Value::kMap:
      return a.map == b.map;
    default:
      return true;  // undefined, none
  }
}

// ---------------------------------------------------------------------------- expressions

struct Tok {
  enum Kind { kName, kString, kInt, kOp, kEnd } kind = kEnd;
  std::string text;
  int64_t value = 0;
  size_t at = 0;  // offset in the template
};

struct Expr {
  enum Kind {
    kLiteral,
    kName,
    kAttr,     // a.name
    kIndex,    // a[b]
    kSlice,    // a[b:c] (args: a, b or null, c or null)
    kCall,     // callee(args...): a method (kAttr callee) or raise_exception
    kFilter,   // a | name(args...)
    kTest,     // a is [not] name
    kUnary,    // not a, -a
    kBinary,   // a op b
    kTernary,  // a if c else b (args: a, c, b or null)
    kList,
    kMap,  // args alternate key, value
  } kind = kLiteral;
  std::string name;  // name, attribute, operator, filter or test; "not" prefix for "is not"
  Value literal;
  std::vector<std::unique_ptr<Expr>> args;
  size_t at = 0;
};
using ExprPtr = std::unique_ptr<Expr>;

}  // namespace

struct ChatTemplate::Node {
  enum Kind { kText, kOutput, kIf, kFor, kSet } kind = kText;
  std::string text;                 // kText
  ExprPtr expr;                     // kOutput, kSet value, kFor iterable
  std::vector<std::string> names;   // kFor variables, kSet name
  std::vector<ExprPtr> conditions;  // kIf, one per branch
  std::vector<std::vector<std::unique_ptr<Node>>>
      bodies;  // kIf branches (+ else), kFor body (+ else)
  size_t at = 0;
};

namespace {

using Node = ChatTemplate::Node;
using Body = std::vector<std::unique_ptr<Node>>;

// Line and column of byte `at`.
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

// Bounds for hostile templates (an MXQ's asset is input like any other file): nesting of
// expressions and blocks (the parser and the renderer recurse), the work of one render
// (nested loops multiply) and its output.
constexpr int kMaxDepth = 128;
constexpr int64_t kMaxSteps = int64_t{1} << 20;
constexpr size_t kMaxOutput = size_t{64} << 20;

class Parser {
 public:
  Parser(std::string_view text, std::string source) : text_(text), source_(std::move(source)) {}

  Status error(size_t at, const std::string& what) const {
    return invalid_argument(source_, ":", where(text_, at), ": ", what);
  }

  // Tokenizes the inside of one tag, [begin, end).
  StatusOr<std::vector<Tok>> lex(size_t begin, size_t end) const {
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
  Status call_args(Expr& e) {
    QBC_RETURN_IF_ERROR(expect_op("("));
    while (!is_op(")")) {
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
        if (a->kind != Expr::kAttr && !(a->kind == Expr::kName && a->name == "raise_exception"))
          return error(at, "only methods and raise_exception() can be called");
        ExprPtr e = make(Expr::kCall, at);
        e->args.push_back(std::move(a));
        QBC_RETURN_IF_ERROR(call_args(*e));
        a = std::move(e);
      } else if (is_op("|")) {
        ++pos_;
        QBC_ASSIGN_OR_RETURN(std::string name, expect_name());
        static const char* known[] = {"trim",  "length", "count",   "upper",
                                      "lower", "string", "default", "tojson"};
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
      } else if (kw == "set") {
        n->kind = Node::kSet;
        QBC_ASSIGN_OR_RETURN(std::string v, expect_name());
        if (is_op(".")) return error(peek().at, "namespace attributes are not supported");
        n->names.push_back(std::move(v));
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
                         body(segs, out, {"elif", "else", "endif", "endfor"}));
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

// ------------------------------------------------------------------------------ rendering

class Renderer {
  int64_t steps_ = 0;

 public:
  Renderer(std::string_view text, std::string source) : text_(text), source_(std::move(source)) {}

  Status error(size_t at, const std::string& what) const {
    return invalid_argument(source_, ":", where(text_, at), ": ", what);
  }

  std::vector<std::map<std::string, Value>> scopes;

  Value lookup(const std::string& name) const {
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return Value();
  }

  Status step(size_t at) {
    if (++steps_ > kMaxSteps)
      return error(at, "rendering takes more than " + std::to_string(kMaxSteps) + " steps");
    return ok_status();
  }

  StatusOr<Value> eval(const Expr& e) {
    QBC_RETURN_IF_ERROR(step(e.at));
    switch (e.kind) {
      case Expr::kLiteral:
        return e.literal;
      case Expr::kName:
        return lookup(e.name);
      case Expr::kAttr: {
        QBC_ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
        const Value* v = a.find(e.name);
        return v != nullptr ? *v : Value();
      }
      case Expr::kIndex: {
        QBC_ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
        QBC_ASSIGN_OR_RETURN(Value i, eval(*e.args[1]));
        if (a.kind == Value::kMap && i.kind == Value::kString) {
          const Value* v = a.find(i.s);
          return v != nullptr ? *v : Value();
        }
        if ((a.kind == Value::kList || a.kind == Value::kString) && i.kind == Value::kInt) {
          const auto n = static_cast<int64_t>(a.kind == Value::kList ? a.list->size() : a.s.size());
          const int64_t k = i.i < 0 ? i.i + n : i.i;
          if (k < 0 || k >= n) return Value();
          if (a.kind == Value::kList) return (*a.list)[k];
          return Value::string(a.s.substr(k, 1));
        }
        return Value();
      }
      case Expr::kSlice: {
        QBC_ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
        if (a.kind != Value::kList && a.kind != Value::kString)
          return error(e.at, "slicing needs a list or a string");
        const auto n = static_cast<int64_t>(a.kind == Value::kList ? a.list->size() : a.s.size());
        int64_t bounds[2] = {0, n};
        for (int k = 0; k < 2; ++k) {
          if (!e.args[1 + k]) continue;
          QBC_ASSIGN_OR_RETURN(Value b, eval(*e.args[1 + k]));
          if (b.kind != Value::kInt) return error(e.at, "slice bounds must be integers");
          bounds[k] = std::clamp<int64_t>(b.i < 0 ? b.i + n : b.i, 0, n);
        }
        const int64_t lo = bounds[0], hi = std::max(bounds[0], bounds[1]);
        if (a.kind == Value::kString) return Value::string(a.s.substr(lo, hi - lo));
        Value out = Value::new_list();
        out.list->assign(a.list->begin() + lo, a.list->begin() + hi);
        return out;
      }
      case Expr::kCall:
        return call(e);
      case Expr::kFilter:
        return filter(e);
      case Expr::kTest:
        return test(e);
      case Expr::kUnary: {
        QBC_ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
        if (e.name == "not") return Value::boolean(!truthy(a));
        if (a.kind != Value::kInt) return error(e.at, "unary - needs an integer");
        if (a.i == INT64_MIN) return error(e.at, "integer overflow");
        return Value::integer(-a.i);
      }
      case Expr::kBinary:
        return binary(e);
      case Expr::kTernary: {
        QBC_ASSIGN_OR_RETURN(Value c, eval(*e.args[1]));
        if (truthy(c)) return eval(*e.args[0]);
        if (!e.args[2]) return Value();
        return eval(*e.args[2]);
      }
      case Expr::kList: {
        Value out = Value::new_list();
        for (const ExprPtr& a : e.args) {
          QBC_ASSIGN_OR_RETURN(Value v, eval(*a));
          out.list->push_back(std::move(v));
        }
        return out;
      }
      case Expr::kMap: {
        Value out = Value::new_map();
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          QBC_ASSIGN_OR_RETURN(Value key, eval(*e.args[k]));
          if (key.kind != Value::kString)
            return error(e.args[k]->at, "mapping keys must be strings");
          QBC_ASSIGN_OR_RETURN(Value v, eval(*e.args[k + 1]));
          out.set(key.s, std::move(v));
        }
        return out;
      }
    }
    return Value();
  }

  StatusOr<Value> binary(const Expr& e) {
    QBC_ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
    const std::string& op = e.name;
    if (op == "and") {
      if (!truthy(a)) return a;
      return eval(*e.args[1]);
    }
    if (op == "or") {
      if (truthy(a)) return a;
      return eval(*e.args[1]);
    }
    QBC_ASSIGN_OR_RETURN(Value b, eval(*e.args[1]));
    if (op == "==") return Value::boolean(equal(a, b));
    if (op == "!=") return Value::boolean(!equal(a, b));
    if (op == "~") return Value::string(text_of(a) + text_of(b));
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.kind == Value::kString && a.kind == Value::kString) {
        found = b.s.find(a.s) != std::string::npos;
      } else if (b.kind == Value::kList) {
        for (const Value& v : *b.list) found = found || equal(a, v);
      } else if (b.kind == Value::kMap && a.kind == Value::kString) {
        found = b.find(a.s) != nullptr;
      } else if (b.kind != Value::kUndefined) {
        return error(e.at, "'in' needs a string, list or mapping on its right");
      }
      return Value::boolean(op == "in" ? found : !found);
    }
    if (op == "+" && a.kind == Value::kString && b.kind == Value::kString)
      return Value::string(a.s + b.s);
    if (op == "+" && a.kind == Value::kList && b.kind == Value::kList) {
      Value out = Value::new_list();
      *out.list = *a.list;
      out.list->insert(out.list->end(), b.list->begin(), b.list->end());
      return out;
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int c = 0;
      if (a.kind == Value::kInt && b.kind == Value::kInt)
        c = a.i < b.i ? -1 : a.i > b.i ? 1 : 0;
      else if (a.kind == Value::kString && b.kind == Value::kString)
        c = a.s.compare(b.s) < 0 ? -1 : a.s.compare(b.s) > 0 ? 1 : 0;
      else
        return error(e.at, "'" + op + "' compares two integers or two strings");
      return Value::boolean(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
    }
    if (a.kind != Value::kInt || b.kind != Value::kInt)
      return error(e.at, "'" + op + "' needs two integers (or two strings for +)");
    int64_t r = 0;
    if (op == "+" || op == "-" || op == "*") {
      const bool overflow = op == "+"   ? __builtin_add_overflow(a.i, b.i, &r)
                            : op == "-" ? __builtin_sub_overflow(a.i, b.i, &r)
                                        : __builtin_mul_overflow(a.i, b.i, &r);
      if (overflow) return error(e.at, "integer overflow");
      return Value::integer(r);
    }
    if (op == "/") return error(e.at, "'/' gives a float, which is not supported (use //)");
    if (b.i == 0) return error(e.at, "division by zero");
    if (b.i == -1)
      return op == "//" ? (a.i == INT64_MIN ? error(e.at, "integer overflow")
                                            : StatusOr<Value>(Value::integer(-a.i)))
                        : StatusOr<Value>(Value::integer(0));
    // Python's floor division and modulo (Jinja's // and %): the sign of the divisor.
    int64_t q = a.i / b.i, m = a.i % b.i;
    if (m != 0 && ((m < 0) != (b.i < 0))) {
      --q;
      m += b.i;
    }
    return Value::integer(op == "//" ? q : m);
  }

  StatusOr<std::vector<Value>> args(const Expr& e, size_t from) {
    std::vector<Value> out;
    for (size_t k = from; k < e.args.size(); ++k) {
      QBC_ASSIGN_OR_RETURN(Value v, eval(*e.args[k]));
      out.push_back(std::move(v));
    }
    return out;
  }

  StatusOr<Value> call(const Expr& e) {
    const Expr& callee = *e.args[0];
    QBC_ASSIGN_OR_RETURN(std::vector<Value> a, args(e, 1));
    if (callee.kind == Expr::kName)  // raise_exception, the only function
      return error(e.at, "raise_exception: " + (a.empty() ? std::string() : text_of(a[0])));
    QBC_ASSIGN_OR_RETURN(Value self, eval(*callee.args[0]));
    const std::string& m = callee.name;
    auto str_arg = [&](size_t k) -> StatusOr<std::string> {
      if (k >= a.size() || a[k].kind != Value::kString)
        return error(e.at, "." + m + "() needs a string argument " + std::to_string(k + 1));
      return a[k].s;
    };
    if (self.kind == Value::kMap && m == "items" && a.empty()) {
      Value out = Value::new_list();
      for (const auto& [k, v] : *self.map) {
        Value pair = Value::new_list();
        pair.list->push_back(Value::string(k));
        pair.list->push_back(v);
        out.list->push_back(std::move(pair));
      }
      return out;
    }
    if (self.kind == Value::kMap && m == "get" && !a.empty() && a[0].kind == Value::kString) {
      const Value* v = self.find(a[0].s);
      return v != nullptr ? *v : (a.size() > 1 ? a[1] : Value::none());
    }
    if (self.kind != Value::kString)
      return error(e.at, "method ." + m +
                             "() is supported on strings only (and items/get on "
                             "mappings)");
    const std::string& s = self.s;
    auto strip = [&](bool left, bool right) {
      const char* ws = " \t\r\n";
      size_t b = left ? s.find_first_not_of(ws) : 0;
      if (b == std::string::npos) return std::string();
      size_t end = right ? s.find_last_not_of(ws) + 1 : s.size();
      return s.substr(b, end - b);
    };
    if (m == "strip") return Value::string(strip(true, true));
    if (m == "lstrip") return Value::string(strip(true, false));
    if (m == "rstrip") return Value::string(strip(false, true));
    if (m == "upper" || m == "lower") {
      std::string out = s;
      for (char& c : out)
        c = static_cast<char>(m == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                           : std::tolower(static_cast<unsigned char>(c)));
      return Value::string(out);
    }
    if (m == "startswith" || m == "endswith") {
      QBC_ASSIGN_OR_RETURN(std::string p, str_arg(0));
      const bool hit = p.size() <= s.size() &&
                       (m == "startswith" ? s.compare(0, p.size(), p) == 0
                                          : s.compare(s.size() - p.size(), p.size(), p) == 0);
      return Value::boolean(hit);
    }
    if (m == "split") {
      QBC_ASSIGN_OR_RETURN(std::string sep, str_arg(0));
      if (sep.empty()) return error(e.at, ".split(): empty separator");
      Value out = Value::new_list();
      size_t from = 0;
      for (size_t hit; (hit = s.find(sep, from)) != std::string::npos; from = hit + sep.size())
        out.list->push_back(Value::string(s.substr(from, hit - from)));
      out.list->push_back(Value::string(s.substr(from)));
      return out;
    }
    if (m == "replace") {
      QBC_ASSIGN_OR_RETURN(std::string from, str_arg(0));
      QBC_ASSIGN_OR_RETURN(std::string to, str_arg(1));
      if (from.empty()) return error(e.at, ".replace(): empty pattern");
      std::string out;
      size_t at = 0;
      for (size_t hit; (hit = s.find(from, at)) != std::string::npos; at = hit + from.size())
        out += s.substr(at, hit - at) + to;
      return Value::string(out + s.substr(at));
    }
    return error(e.at, "method ." + m + "() is not supported");
  }

  StatusOr<Value> filter(const Expr& e) {
    QBC_ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
    QBC_ASSIGN_OR_RETURN(std::vector<Value> extra, args(e, 1));
    const std::string& f = e.name;
    if (f == "trim") {
      const std::string s = text_of(a);
      const size_t b = s.find_first_not_of(" \t\r\n");
      if (b == std::string::npos) return Value::string("");
      return Value::string(s.substr(b, s.find_last_not_of(" \t\r\n") + 1 - b));
    }
    if (f == "length" || f == "count") {
      if (a.kind == Value::kString) return Value::integer(static_cast<int64_t>(a.s.size()));
      if (a.kind == Value::kList) return Value::integer(static_cast<int64_t>(a.list->size()));
      if (a.kind == Value::kMap) return Value::integer(static_cast<int64_t>(a.map->size()));
      return error(e.at, "|" + f + " needs a string, list or mapping");
    }
    if (f == "upper" || f == "lower") {
      std::string s = text_of(a);
      for (char& c : s)
        c = static_cast<char>(f == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                           : std::tolower(static_cast<unsigned char>(c)));
      return Value::string(s);
    }
    if (f == "string") return Value::string(text_of(a));
    if (f == "default") {
      if (a.kind != Value::kUndefined) return a;
      return extra.empty() ? Value::string("") : extra[0];
    }
    return Value::string(json_of(a));  // tojson
  }

  StatusOr<Value> test(const Expr& e) {
    QBC_ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
    std::string t = e.name;
    const bool negate = t.rfind("not ", 0) == 0;
    if (negate) t = t.substr(4);
    bool r;
    if (t == "defined")
      r = a.kind != Value::kUndefined;
    else if (t == "undefined")
      r = a.kind == Value::kUndefined;
    else if (t == "none")
      r = a.kind == Value::kNone;
    else if (t == "string")
      r = a.kind == Value::kString;
    else if (t == "number")
      r = a.kind == Value::kInt;
    else if (t == "mapping")
      r = a.kind == Value::kMap;
    else if (t == "iterable" || t == "sequence")
      r = a.kind == Value::kList || a.kind == Value::kString || a.kind == Value::kMap;
    else
      return error(e.at, "test " + quote_prefix(t) + " is not supported");
    return Value::boolean(negate ? !r : r);
  }

  Status run(const Body& body, std::string& out) {
    for (const std::unique_ptr<Node>& n : body) {
      QBC_RETURN_IF_ERROR(step(n->at));
      if (out.size() > kMaxOutput)
        return error(n->at,
                     "the rendered text exceeds " + std::to_string(kMaxOutput >> 20) + " MiB");
      switch (n->kind) {
        case Node::kText:
          out += n->text;
          break;
        case Node::kOutput: {
          QBC_ASSIGN_OR_RETURN(Value v, eval(*n->expr));
          out += text_of(v);
          break;
        }
        case Node::kSet: {
          QBC_ASSIGN_OR_RETURN(Value v, eval(*n->expr));
          scopes.back()[n->names[0]] = std::move(v);
          break;
        }
        case Node::kIf: {
          size_t branch = 0;
          for (; branch < n->conditions.size(); ++branch) {
            QBC_ASSIGN_OR_RETURN(Value c, eval(*n->conditions[branch]));
            if (truthy(c)) break;
          }
          if (branch < n->bodies.size()) QBC_RETURN_IF_ERROR(run(n->bodies[branch], out));
          break;
        }
        case Node::kFor: {
          QBC_ASSIGN_OR_RETURN(Value it, eval(*n->expr));
          std::vector<Value> items;
          if (it.kind == Value::kList) {
            items = *it.list;
          } else if (it.kind == Value::kMap) {
            for (const auto& [k, v] : *it.map) items.push_back(Value::string(k));
          } else if (it.kind != Value::kUndefined && it.kind != Value::kNone) {
            return error(n->at, "{% for %} needs a list or a mapping");
          }
          if (items.empty()) {
            if (n->bodies.size() > 1) QBC_RETURN_IF_ERROR(run(n->bodies[1], out));
            break;
          }
          const auto len = static_cast<int64_t>(items.size());
          for (int64_t k = 0; k < len; ++k) {
            scopes.emplace_back();
            Value loop = Value::new_map();
            loop.set("index", Value::integer(k + 1));
            loop.set("index0", Value::integer(k));
            loop.set("revindex", Value::integer(len - k));
            loop.set("revindex0", Value::integer(len - k - 1));
            loop.set("first", Value::boolean(k == 0));
            loop.set("last", Value::boolean(k + 1 == len));
            loop.set("length", Value::integer(len));
            scopes.back()["loop"] = loop;
            if (n->names.size() == 1) {
              scopes.back()[n->names[0]] = items[k];
            } else {
              if (items[k].kind != Value::kList || items[k].list->size() != n->names.size())
                return error(n->at, "cannot unpack a loop item into " +
                                        std::to_string(n->names.size()) + " names");
              for (size_t v = 0; v < n->names.size(); ++v)
                scopes.back()[n->names[v]] = (*items[k].list)[v];
            }
            const Status s = run(n->bodies[0], out);
            scopes.pop_back();
            QBC_RETURN_IF_ERROR(s);
          }
          break;
        }
      }
    }
    return ok_status();
  }

 private:
  std::string_view text_;
  std::string source_;
};

}  // namespace

StatusOr<ChatTemplate> ChatTemplate::parse(std::string_view text, std::string_view source) {
  ChatTemplate t;
  t.source_ = std::string(source);
  Parser p(text, t.source_);
  QBC_ASSIGN_OR_RETURN(Body body, p.parse_all());
  t.body_ = std::make_shared<const Body>(std::move(body));
  t.text_ = std::string(text);
  return t;
}

StatusOr<std::string> ChatTemplate::render(const ChatContext& context) const {
  Renderer r(text_, source_);
  r.scopes.emplace_back();
  Value messages = Value::new_list();
  for (const ChatMessage& m : context.messages) {
    Value v = Value::new_map();
    v.set("role", Value::string(m.role));
    v.set("content", Value::string(m.content));
    messages.list->push_back(std::move(v));
  }
  r.scopes.back()["messages"] = messages;
  r.scopes.back()["add_generation_prompt"] = Value::boolean(context.add_generation_prompt);
  r.scopes.back()["bos_token"] = Value::string(context.bos_token);
  r.scopes.back()["eos_token"] = Value::string(context.eos_token);
  std::string out;
  QBC_RETURN_IF_ERROR(r.run(*body_, out));
  return out;
}

}  // namespace qbc::tokenizer
