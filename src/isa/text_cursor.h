// Internal to the text parser (text_parser.cpp, text_parse_instr.cpp): a cursor over one
// line of the NPU program text form, with the small lexical pieces the form is made of
// (words, integers, numbers, `name=` keys, expressions, buffer references). Every error
// names "label:line:column" and the token found there.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "qbc/isa/program.h"
#include "qbc/support/status.h"

namespace qbc::isa::text {

/// Buffer names of the bundle being parsed, for references (%name).
struct BufferNames {
  const std::vector<Buffer>* buffers = nullptr;
  /// The index of `%name` / `#index`, or -1.
  int32_t find(std::string_view name) const;
};

class Cursor {
 public:
  Cursor(std::string_view line, int line_no, const std::string& label)
      : s_(line), line_(line_no), label_(&label) {}

  /// An error at the current column naming the token there.
  Status error(const std::string& what) const;
  /// An error at column `col` (0-based).
  Status error_at(size_t col, const std::string& what) const;

  void skip_spaces();
  bool at_end();  ///< only spaces left
  size_t pos() const { return i_; }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  /// True (and consumed) when the rest starts with `lit` after spaces.
  bool accept(std::string_view lit);
  Status expect(std::string_view lit);
  Status expect_end();

  /// A run of non-space characters (may be empty at the end of the line).
  std::string_view word();
  /// A key ("name=") if one follows; does not consume otherwise.
  bool key(std::string* name);
  /// `name=` exactly.
  Status expect_key(std::string_view name);

  Status integer(int64_t* v);
  Status int32(int32_t* v);
  Status real(double* v);
  Status real(float* v);
  Status boolean(bool* v);
  /// "#N" (attention or rope index).
  Status index(int32_t* v);
  /// An expression of Expr::to_string's grammar.
  Status expr(Expr* out);
  /// "%name[+offset]" or "-".
  Status ref(const BufferNames& names, Ref* out);
  /// The rest of the line (spaces trimmed).
  std::string_view rest();

  const std::string& label() const { return *label_; }
  int line() const { return line_; }

 private:
  // Expression grammar (text.cpp prints this): sum := mod (('+'|'-') mod)*;
  // mod := product ('mod' product)*; product := atom (('*'|'/') atom)*;
  // atom := int | start | seq | slot | iN | (sum) | min(sum, sum) | max(..) | ceil(..).
  Status sum(std::vector<Expr::Node>* nodes, int32_t* root);
  Status mod(std::vector<Expr::Node>* nodes, int32_t* root);
  Status product(std::vector<Expr::Node>* nodes, int32_t* root);
  Status atom(std::vector<Expr::Node>* nodes, int32_t* root);
  Status call(Expr::Op op, std::vector<Expr::Node>* nodes, int32_t* root);

  std::string_view s_;
  size_t i_ = 0;
  int line_;
  const std::string* label_;
};

/// Splits `text` into lines (without the newline).
std::vector<std::string_view> split_lines(std::string_view text);

}  // namespace qbc::isa::text
