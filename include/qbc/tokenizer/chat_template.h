// Chat templates: the Jinja templates HF models ship (tokenizer_config.json `chat_template`,
// or chat_template.jinja) rendered without Python. This is not a full Jinja engine but the
// subset chat templates use, rendered the way HF's apply_chat_template environment does
// (trim_blocks and lstrip_blocks on). docs/runtime.md lists what is supported:
//   - text, {{ expr }}, {# comments #}, the "-" whitespace control on any tag, HF's
//     {% generation %} blocks (rendered as their body);
//   - {% for x in expr %} (lists and the keys of a mapping; loop.index, index0, first, last,
//     length, revindex, revindex0) with {% else %}, {% if %}/{% elif %}/{% else %}, {% set x =
//     expr %}, namespace(name=value, ...) and {% set ns.name = expr %};
//   - literals (strings with \n \t \' \" \\ escapes, integers, true/false/none in either
//     case), names, attribute and index access (a.b, a['b'], a[0], a[-1], a[1:], a[:-1]),
//     + - * // % on integers (Python semantics), + and ~ on strings, comparisons, in / not in, and
//     / or / not, `x if c else y`, the tests defined, undefined, none, string, number, mapping,
//     iterable, sequence (with `is not`), the filters trim, length / count, upper, lower,
//     string, default(x), tojson (strings, numbers, lists, mappings), selectattr(name[, equalto|ne,
//     value]), the string methods
//     strip, lstrip, rstrip, upper, lower, startswith, endswith, split(sep), replace(a, b),
//     and raise_exception(message) (an error naming the template).
// Anything else (macros, other filters, floats and /) is refused when the
// template is parsed or rendered, with the line and column. Hostile templates are bounded:
// nesting (128 levels), the work of one render (2^20 steps) and its output (64 MiB).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qbc/support/status.h"

namespace qbc::tokenizer {

/// One item of a message's content list (HF processors' form): "image" (a placeholder the
/// template writes the family's image marker for) or "text" with its text.
struct ChatPart {
  std::string type;
  std::string text;
};

/// One message of a conversation.
struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string r, std::string c, std::vector<ChatPart> p = {})
      : role(std::move(r)), content(std::move(c)), parts(std::move(p)) {}
  std::string role;  ///< "system", "user", "assistant", ...
  std::string content;
  /// When not empty, the template sees `content` as this list of {"type": ...} mappings
  /// (with "text" for text items) instead of the string: how a VLM's template is given images.
  std::vector<ChatPart> parts;
};

/// What a template sees: `messages`, `add_generation_prompt`, `bos_token`, `eos_token`.
struct ChatContext {
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
};

class ChatTemplate {
 public:
  /// Parses `text`. Errors name `source` with the line and column of the construct.
  static StatusOr<ChatTemplate> parse(std::string_view text, std::string_view source);
  /// Renders the template for `context`. raise_exception() and type errors are
  /// kInvalidArgument naming the source.
  StatusOr<std::string> render(const ChatContext& context) const;

  struct Node;

 private:
  std::string source_;
  std::string text_;
  std::shared_ptr<const std::vector<std::unique_ptr<Node>>> body_;
};

}  // namespace qbc::tokenizer
