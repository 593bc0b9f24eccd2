// The lexical pieces of the NPU program text form (see text_cursor.h).
#include "text_cursor.h"

#include <cctype>
#include <charconv>
#include <cstring>

namespace qbc::isa::text {
namespace {

bool is_word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '.' || c == '-';
}

Expr::Node leaf(Expr::Op op, int64_t v) { return Expr::Node{op, v, -1, -1}; }

int32_t push(std::vector<Expr::Node>* nodes, Expr::Node n) {
  nodes->push_back(n);
  return static_cast<int32_t>(nodes->size() - 1);
}

}  // namespace

int32_t BufferNames::find(std::string_view name) const {
  if (name.size() > 2 && name[0] == '%' && name[1] == '#') name.remove_prefix(1);
  if (name.size() > 1 && name[0] == '#') {
    int64_t v = 0;
    auto [p, ec] = std::from_chars(name.data() + 1, name.data() + name.size(), v);
    if (ec == std::errc() && p == name.data() + name.size()) return static_cast<int32_t>(v);
    return -1;
  }
  if (name.empty() || name[0] != '%') return -1;
  name.remove_prefix(1);
  for (size_t i = 0; i < buffers->size(); ++i) {
    if ((*buffers)[i].name == name) return static_cast<int32_t>(i);
  }
  return -1;
}

Status Cursor::error_at(size_t col, const std::string& what) const {
  size_t end = col;
  while (end < s_.size() && s_[end] != ' ') ++end;
  const std::string tok(s_.substr(std::min(col, s_.size()), end - std::min(col, s_.size())));
  return invalid_argument(
      *label_, ":", line_, ":", col + 1, ": ", what,
      tok.empty() ? std::string(" (at the end of the line)") : " (found '" + tok + "')");
}

Status Cursor::error(const std::string& what) const { return error_at(i_, what); }

void Cursor::skip_spaces() {
  while (i_ < s_.size() && s_[i_] == ' ') ++i_;
}

bool Cursor::at_end() {
  skip_spaces();
  return i_ >= s_.size();
}

bool Cursor::accept(std::string_view lit) {
  skip_spaces();
  if (s_.substr(i_, lit.size()) != lit) return false;
  i_ += lit.size();
  return true;
}

Status Cursor::expect(std::string_view lit) {
  if (accept(lit)) return ok_status();
  return error("expected '" + std::string(lit) + "'");
}

Status Cursor::expect_end() {
  if (at_end()) return ok_status();
  return error("expected the end of the line");
}

std::string_view Cursor::word() {
  skip_spaces();
  const size_t start = i_;
  while (i_ < s_.size() && s_[i_] != ' ') ++i_;
  return s_.substr(start, i_ - start);
}

bool Cursor::key(std::string* name) {
  skip_spaces();
  size_t j = i_;
  while (j < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[j])) != 0 || s_[j] == '_'))
    ++j;
  if (j == i_ || j >= s_.size() || s_[j] != '=') return false;
  *name = std::string(s_.substr(i_, j - i_));
  i_ = j + 1;
  return true;
}

Status Cursor::expect_key(std::string_view name) {
  std::string k;
  const size_t at = (skip_spaces(), i_);
  if (!key(&k) || k != name) return error_at(at, "expected '" + std::string(name) + "='");
  return ok_status();
}

Status Cursor::integer(int64_t* v) {
  skip_spaces();
  const char* b = s_.data() + i_;
  auto [p, ec] = std::from_chars(b, s_.data() + s_.size(), *v);
  if (ec != std::errc() || (p < s_.data() + s_.size() && is_word_char(*p))) {
    return error("expected an integer");
  }
  i_ += static_cast<size_t>(p - b);
  return ok_status();
}

Status Cursor::int32(int32_t* v) {
  const size_t at = (skip_spaces(), i_);
  int64_t x = 0;
  QBC_RETURN_IF_ERROR(integer(&x));
  if (x < INT32_MIN || x > INT32_MAX) return error_at(at, "integer out of the 32-bit range");
  *v = static_cast<int32_t>(x);
  return ok_status();
}

Status Cursor::real(double* v) {
  skip_spaces();
  const char* b = s_.data() + i_;
  size_t n = 0;
  while (i_ + n < s_.size() && s_[i_ + n] != ' ' && s_[i_ + n] != ',' && s_[i_ + n] != ']') ++n;
  auto [p, ec] = std::from_chars(b, b + n, *v);
  if (ec != std::errc() || p != b + n) return error("expected a number");
  i_ += n;
  return ok_status();
}

Status Cursor::real(float* v) {
  skip_spaces();
  const char* b = s_.data() + i_;
  size_t n = 0;
  while (i_ + n < s_.size() && s_[i_ + n] != ' ') ++n;
  auto [p, ec] = std::from_chars(b, b + n, *v);
  if (ec != std::errc() || p != b + n) return error("expected a number");
  i_ += n;
  return ok_status();
}

Status Cursor::boolean(bool* v) {
  if (accept("true")) {
    *v = true;
  } else if (accept("false")) {
    *v = false;
  } else {
    return error("expected true or false");
  }
  return ok_status();
}

Status Cursor::index(int32_t* v) {
  QBC_RETURN_IF_ERROR(expect("#"));
  return int32(v);
}

Status Cursor::ref(const BufferNames& names, Ref* out) {
  skip_spaces();
  const size_t at = i_;
  if (accept("-")) {
    *out = Ref{};
    return ok_status();
  }
  if (peek() != '%' && peek() != '#') return error("expected a buffer reference (%name[+offset])");
  const size_t open = s_.find("[+", i_);
  if (open == std::string_view::npos) return error("expected '[+' after the buffer name");
  const std::string_view name = s_.substr(i_, open - i_);
  out->buffer = names.find(name);
  if (out->buffer < 0) return error_at(at, "unknown buffer " + std::string(name));
  i_ = open + 2;
  QBC_RETURN_IF_ERROR(expr(&out->offset));
  return expect("]");
}

std::string_view Cursor::rest() {
  skip_spaces();
  std::string_view r = s_.substr(i_);
  while (!r.empty() && r.back() == ' ') r.remove_suffix(1);
  i_ = s_.size();
  return r;
}

Status Cursor::expr(Expr* out) {
  const size_t at = (skip_spaces(), i_);
  std::vector<Expr::Node> nodes;
  int32_t root = -1;
  QBC_RETURN_IF_ERROR(sum(&nodes, &root));
  if (!Expr::from_nodes(std::move(nodes), out)) return error_at(at, "malformed expression");
  return ok_status();
}

Status Cursor::sum(std::vector<Expr::Node>* nodes, int32_t* root) {
  QBC_RETURN_IF_ERROR(mod(nodes, root));
  for (;;) {
    skip_spaces();
    // " - " is subtraction; "-5" right after an operator is a negative constant (atom).
    Expr::Op op;
    if (s_.substr(i_, 2) == "+ ") {
      op = Expr::Op::kAdd;
    } else if (s_.substr(i_, 2) == "- ") {
      op = Expr::Op::kSub;
    } else {
      return ok_status();
    }
    i_ += 2;
    int32_t rhs = -1;
    QBC_RETURN_IF_ERROR(mod(nodes, &rhs));
    *root = push(nodes, Expr::Node{op, 0, *root, rhs});
  }
}

Status Cursor::mod(std::vector<Expr::Node>* nodes, int32_t* root) {
  QBC_RETURN_IF_ERROR(product(nodes, root));
  while (accept("mod ")) {
    int32_t rhs = -1;
    QBC_RETURN_IF_ERROR(product(nodes, &rhs));
    *root = push(nodes, Expr::Node{Expr::Op::kMod, 0, *root, rhs});
  }
  return ok_status();
}

Status Cursor::product(std::vector<Expr::Node>* nodes, int32_t* root) {
  QBC_RETURN_IF_ERROR(atom(nodes, root));
  for (;;) {
    Expr::Op op;
    if (peek() == '*') {
      op = Expr::Op::kMul;
    } else if (peek() == '/') {
      op = Expr::Op::kFloorDiv;
    } else {
      return ok_status();
    }
    ++i_;
    int32_t rhs = -1;
    QBC_RETURN_IF_ERROR(atom(nodes, &rhs));
    *root = push(nodes, Expr::Node{op, 0, *root, rhs});
  }
}

Status Cursor::call(Expr::Op op, std::vector<Expr::Node>* nodes, int32_t* root) {
  int32_t a = -1, b = -1;
  QBC_RETURN_IF_ERROR(sum(nodes, &a));
  QBC_RETURN_IF_ERROR(expect(","));
  QBC_RETURN_IF_ERROR(sum(nodes, &b));
  QBC_RETURN_IF_ERROR(expect(")"));
  *root = push(nodes, Expr::Node{op, 0, a, b});
  return ok_status();
}

Status Cursor::atom(std::vector<Expr::Node>* nodes, int32_t* root) {
  skip_spaces();
  const char c = peek();
  if (std::isdigit(static_cast<unsigned char>(c)) != 0 || c == '-') {
    int64_t v = 0;
    const char* b = s_.data() + i_;
    auto [p, ec] = std::from_chars(b, s_.data() + s_.size(), v);
    if (ec != std::errc()) return error("expected an expression");
    i_ += static_cast<size_t>(p - b);
    *root = push(nodes, leaf(Expr::Op::kConst, v));
    return ok_status();
  }
  if (accept("(")) {
    QBC_RETURN_IF_ERROR(sum(nodes, root));
    return expect(")");
  }
  const std::pair<const char*, Expr::Op> calls[] = {
      {"min(", Expr::Op::kMin}, {"max(", Expr::Op::kMax}, {"ceil(", Expr::Op::kCeilDiv}};
  for (const auto& [name, op] : calls) {
    if (accept(name)) return call(op, nodes, root);
  }
  for (int s = 0; s < kNumSyms; ++s) {
    const char* name = sym_name(static_cast<Sym>(s));
    const size_t n = std::strlen(name);
    if (s_.substr(i_, n) == name && (i_ + n >= s_.size() || !is_word_char(s_[i_ + n]))) {
      i_ += n;
      *root = push(nodes, leaf(Expr::Op::kSym, s));
      return ok_status();
    }
  }
  if (c == 'i' && i_ + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_ + 1]))) {
    ++i_;
    int64_t var = 0;
    QBC_RETURN_IF_ERROR(integer(&var));
    *root = push(nodes, leaf(Expr::Op::kLoop, var));
    return ok_status();
  }
  return error("expected an expression");
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace qbc::isa::text
