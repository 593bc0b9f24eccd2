// Chat templates: the Jinja subset of qbc/tokenizer/chat_template.h. parse() lexes and parses
// the text into a tree (chat_template_lexer.cpp, chat_template_parser.cpp); render() walks it
// (chat_template_renderer.cpp).
#include "qbc/tokenizer/chat_template.h"

#include <utility>

#include "chat_template_internal.h"

namespace qbc::tokenizer {

StatusOr<ChatTemplate> ChatTemplate::parse(std::string_view text, std::string_view source) {
  ChatTemplate t;
  t.source_ = std::string(source);
  QBC_ASSIGN_OR_RETURN(chat::Body body, chat::parse_template(text, t.source_));
  t.body_ = std::make_shared<const chat::Body>(std::move(body));
  t.text_ = std::string(text);
  return t;
}

StatusOr<std::string> ChatTemplate::render(const ChatContext& context) const {
  std::string out;
  QBC_RETURN_IF_ERROR(chat::render_template(*body_, text_, source_, context, out));
  return out;
}

}  // namespace qbc::tokenizer
