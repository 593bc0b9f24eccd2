// Internal to the chat-template engine (qbc/tokenizer/chat_template.h): the values templates
// compute with, the tokens and the expression and statement trees, and the three steps of
// the engine, one file each: chat_template_lexer.cpp cuts a tag into tokens,
// chat_template_parser.cpp builds the tree, chat_template_renderer.cpp walks it
// (chat_template_value.cpp: truthiness, text and JSON of values).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qbc/support/status.h"
#include "qbc/tokenizer/chat_template.h"

namespace qbc::tokenizer {
namespace chat {

struct Value {
  enum Kind { kUndefined, kNone, kBool, kInt, kString, kList, kMap } kind = kUndefined;
  bool b = false;
  int64_t i = 0;
  std::string s;
  std::shared_ptr<std::vector<Value>> list;
  std::shared_ptr<std::vector<std::pair<std::string, Value>>> map;
  /// A kMap made by namespace(...): the one kind of value `{% set ns.attr = x %}` may change
  /// (every copy shares the map, so a change inside a loop is seen after it).
  bool ns = false;

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

bool truthy(const Value& v);
std::string text_of(const Value& v);
std::string json_string(const std::string& s);
std::string json_of(const Value& v);
bool equal(const Value& a, const Value& b);

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
  /// kCall of namespace(): the keyword of each argument after the callee (args[k + 1]).
  std::vector<std::string> keywords;
  size_t at = 0;
};
using ExprPtr = std::unique_ptr<Expr>;

// Bounds for hostile templates (an MXQ's asset is input like any other file): nesting of
// expressions and blocks (the parser and the renderer recurse), the work of one render
// (nested loops multiply) and its output.
constexpr int kMaxDepth = 128;
constexpr int64_t kMaxSteps = int64_t{1} << 20;
constexpr size_t kMaxOutput = size_t{64} << 20;

/// Line and column ("3:14") of byte `at` of `text`.
std::string where(std::string_view text, size_t at);

/// The tokens inside one tag, text[begin, end), ending with a kEnd token at `end`; errors
/// name source:line:column.
StatusOr<std::vector<Tok>> lex_tag(std::string_view text, size_t begin, size_t end,
                                   const std::string& source);

}  // namespace chat

struct ChatTemplate::Node {
  enum Kind { kText, kOutput, kIf, kFor, kSet } kind = kText;
  std::string text;                       // kText
  chat::ExprPtr expr;                     // kOutput, kSet value, kFor iterable
  std::vector<std::string> names;         // kFor variables; kSet name, or namespace and attribute
  std::vector<chat::ExprPtr> conditions;  // kIf, one per branch
  std::vector<std::vector<std::unique_ptr<Node>>>
      bodies;  // kIf branches (+ else), kFor body (+ else)
  size_t at = 0;
};

namespace chat {

using Node = ChatTemplate::Node;
using Body = std::vector<std::unique_ptr<Node>>;

/// The tree of template `text` (errors name `source`:line:column).
StatusOr<Body> parse_template(std::string_view text, const std::string& source);

/// Renders `body` (parsed from `text`) with `context`'s messages and tokens into `out`.
Status render_template(const Body& body, std::string_view text, const std::string& source,
                       const ChatContext& context, std::string& out);

}  // namespace chat
}  // namespace qbc::tokenizer
