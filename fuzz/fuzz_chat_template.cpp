// libFuzzer target: a chat template (tokenizer_config.json chat_template or the
// chat_template.jinja asset) parsed and rendered for a three-message conversation.
#include "fuzz_util.h"
#include "qbc/tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto t = qbc::tokenizer::ChatTemplate::parse(text, "chat_template.jinja");
  qbc::fuzz::check(t.status());
  if (!t.ok()) return 0;
  qbc::tokenizer::ChatContext ctx;
  ctx.messages = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}};
  ctx.bos_token = "<s>";
  ctx.eos_token = "</s>";
  qbc::fuzz::check(t->render(ctx).status());
  return 0;
}
