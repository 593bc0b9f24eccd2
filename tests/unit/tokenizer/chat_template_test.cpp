// Chat templates: the Jinja subset renders the templates real models ship (ChatML as in Qwen2,
// Llama 2's with raise_exception and a system message folded in, Zephyr-style) exactly as
// HF's apply_chat_template does, whitespace rules included; constructs outside the subset are
// refused at parse time with the line and column.
#include "qbc/tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "test_support.h"

namespace qbc::tokenizer {
namespace {

using ::qbc::testing::contains;

StatusOr<std::string> render(const std::string& tmpl, const ChatContext& ctx) {
  QBC_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::parse(tmpl, "tokenizer_config.json"));
  return t.render(ctx);
}

ChatContext chat(bool gen = true) {
  ChatContext c;
  c.messages = {{"system", "Be brief."}, {"user", "Hi!"}, {"assistant", "Hello."}, {"user", "Bye"}};
  c.add_generation_prompt = gen;
  c.bos_token = "<s>";
  c.eos_token = "</s>";
  return c;
}

TEST(ChatTemplate, ChatMl) {
  const std::string t =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
      "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
      "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
      "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
  auto r = render(t, chat());
  QBC_ASSERT_OK(r);
  EXPECT_EQ(*r,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n");
  ChatContext c = chat(false);
  c.messages.erase(c.messages.begin());
  r = render(t, c);
  QBC_ASSERT_OK(r);
  EXPECT_EQ(r->rfind("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n", 0), 0u);
  EXPECT_FALSE(contains(*r, "<|im_start|>assistant\n<"));
}

TEST(ChatTemplate, Llama2WithSystemMessageAndRaiseException) {
  // Llama 2's template (tokenizer_config.json of meta-llama/Llama-2-7b-chat-hf).
  const std::string t =
      "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
      "{% set system_message = messages[0]['content'] %}{% else %}"
      "{% set loop_messages = messages %}{% set system_message = false %}{% endif %}"
      "{% for message in loop_messages %}"
      "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
      "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
      "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
      "{% else %}{% set content = message['content'] %}{% endif %}"
      "{% if message['role'] == 'user' %}"
      "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
      "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}"
      "{% endif %}{% endfor %}";
  auto r = render(t, chat());
  QBC_ASSERT_OK(r);
  EXPECT_EQ(*r,
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi! [/INST] Hello. </s><s>[INST] Bye "
            "[/INST]");
  ChatContext bad = chat();
  bad.messages.push_back({"user", "again"});
  r = render(t, bad);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), "raise_exception: Conversation roles must alternate"))
      << r.status().message();
  EXPECT_TRUE(contains(r.status().message(), "tokenizer_config.json:1:")) << r.status().message();
}

TEST(ChatTemplate, WhitespaceControlTrimAndLstripBlocks) {
  // Zephyr-style, written over lines as templates in .jinja files are.
  const std::string t =
      "{% for message in messages %}\n"
      "    {% if message.role == 'user' %}\n"
      "{{ '<|user|>\\n' + message.content + eos_token }}\n"
      "    {% elif message.role == 'system' -%}\n"
      "   {{ '<|system|>\\n' + message.content | trim + eos_token }}\n"
      "    {%- else %}\n"
      "{{ '<|assistant|>\\n'  + message.content + eos_token }}\n"
      "    {% endif %}\n"
      "{# a comment #}\n"
      "{% endfor %}\n"
      "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}";
  ChatContext c = chat();
  c.messages[0].content = "  Be brief.  ";
  auto r = render(t, c);
  QBC_ASSERT_OK(r);
  EXPECT_EQ(*r,
            "<|system|>\nBe brief.</s><|user|>\nHi!</s>\n<|assistant|>\nHello.</s>\n"
            "<|user|>\nBye</s>\n<|assistant|>");
}

TEST(ChatTemplate, ExpressionsFiltersAndTests) {
  ChatContext c = chat();
  auto r = render(
      "{{ messages | length }} {{ messages[-1].content | upper }} {{ 'x' ~ (3 * 2 - 1) }} "
      "{{ 'yes' if tools is not defined else 'no' }} {{ (messages[1:3] | length) }} "
      "{{ 'a,b'.split(',') | tojson }} {{ 'abc'.startswith('ab') }} {{ 'Hi' in 'Hi!' }} "
      "{% for m in messages %}{{ loop.index }}{% if not loop.last %},{% endif %}{% endfor %} "
      "{{ undefined_name | default('d') }} {{ {'k': [1, none, true]} | tojson }}",
      c);
  QBC_ASSERT_OK(r);
  EXPECT_EQ(*r, "4 BYE x5 yes 2 [\"a\", \"b\"] True True 1,2,3,4 d {\"k\": [1, null, true]}");
  // A set inside a loop does not leak out (Jinja scoping).
  r = render("{% set x = 1 %}{% for m in messages %}{% set x = 2 %}{% endfor %}{{ x }}", c);
  QBC_ASSERT_OK(r);
  EXPECT_EQ(*r, "1");
}

TEST(ChatTemplate, OutsideTheSubsetIsRefusedWithLineAndColumn) {
  struct Case {
    const char* tmpl;
    const char* message;
  };
  for (const Case& c :
       {Case{"ok\n{% macro m() %}{% endmacro %}", ":2:4: {% macro %} is not supported"},
        Case{"{{ x | wordcount }}", "filter 'wordcount' is not supported"},
        Case{"{% if x %}never closed", "without {% endif %}"}, Case{"{{ x ", "unterminated tag"},
        Case{"{% endfor %}", "without its opening tag"},
        Case{"{% endgeneration %}", "without its opening tag"},
        Case{"{% generation %}open", "without {% endgeneration %}"},
        Case{"{{ namespace(1) }}", "keyword arguments"}, Case{"{{ 1.5 }}", "float literals"}}) {
    auto t = ChatTemplate::parse(c.tmpl, "chat_template.jinja");
    ASSERT_FALSE(t.ok()) << c.tmpl;
    EXPECT_TRUE(contains(t.status().message(), "chat_template.jinja")) << t.status().message();
    EXPECT_TRUE(contains(t.status().message(), c.message))
        << c.tmpl << ": " << t.status().message();
  }
}

TEST(ChatTemplate, HostileTemplatesAreBoundedNotCrashes) {
  // Deep nesting would overflow the parser's stack; it is refused instead.
  auto deep = ChatTemplate::parse(
      "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}", "t");
  ASSERT_FALSE(deep.ok());
  EXPECT_TRUE(contains(deep.status().message(), "nested deeper than")) << deep.status().message();
  std::string blocks;
  for (int i = 0; i < 1000; ++i) blocks += "{% if true %}";
  auto nested = ChatTemplate::parse(blocks, "t");
  ASSERT_FALSE(nested.ok());
  EXPECT_TRUE(contains(nested.status().message(), "nested deeper than"));
  // Nested loops multiply: 4^20 iterations stop at the step budget, quickly.
  std::string loops;
  for (int i = 0; i < 20; ++i) loops += "{% for m" + std::to_string(i) + " in messages %}";
  loops += "x";
  for (int i = 0; i < 20; ++i) loops += "{% endfor %}";
  auto r = render(loops, chat());
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), "steps")) << r.status().message();
  // Integer edge cases are errors, not undefined behaviour; // and % follow Python.
  r = render("{{ 9223372036854775807 }}", chat());
  QBC_ASSERT_OK(r);
  EXPECT_EQ(*r, "9223372036854775807");
  EXPECT_FALSE(ChatTemplate::parse("{{ 9223372036854775808 }}", "t").ok());
  for (const char* overflow : {"{{ 9223372036854775807 + 1 }}", "{{ 4611686018427387904 * 2 }}",
                               "{{ -9223372036854775807 - 2 }}"}) {
    r = render(overflow, chat());
    EXPECT_TRUE(!r.ok() && contains(r.status().message(), "integer overflow")) << overflow;
  }
  r = render("{{ 1 // 0 }}", chat());
  EXPECT_TRUE(!r.ok() && contains(r.status().message(), "division by zero"));
  r = render("{{ 3 / 2 }}", chat());
  EXPECT_TRUE(!r.ok() && contains(r.status().message(), "use //"));
  r = render("{{ -7 // 2 }} {{ -7 % 2 }} {{ 7 % -2 }}", chat());
  QBC_ASSERT_OK(r);
  EXPECT_EQ(*r, "-4 1 -1");
}

// namespace(): a value a loop body can change and the code after the loop sees (a plain set
// stays in the loop's scope, as in Jinja); setting an attribute of anything else is an error.
TEST(ChatTemplate, NamespaceCarriesAValueOutOfALoop) {
  const auto r = render(
      "{% set ns = namespace(n=0, seen='') %}{% set x = 1 %}{% for m in messages %}"
      "{% set ns.n = ns.n + 1 %}{% set ns.seen = ns.seen + m.role[0] %}{% set x = 5 %}"
      "{% endfor %}{{ ns.n }} {{ ns.seen }} {{ x }}",
      chat());
  QBC_ASSERT_OK(r);
  EXPECT_EQ(*r, "4 suau 1");
  const auto bad = render("{% set m = messages[0] %}{% set m.role = 'x' %}", chat());
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(contains(bad.status().message(), "'m' is not a namespace()"))
      << bad.status().message();
}

// selectattr over a message's content list (LLaVA's template), and {% generation %} blocks
// render their body.
TEST(ChatTemplate, SelectattrAndGenerationBlocks) {
  ChatContext c;
  c.messages = {{"user", "", {{"image", ""}, {"text", "What is this?"}, {"image", ""}}},
                {"assistant", "", {{"text", "A cat."}}}};
  const auto r = render(
      "{% for m in messages %}{% for p in m.content | selectattr('type', 'equalto', 'image') %}"
      "I{% endfor %}{% for p in m.content | selectattr('type', '!=', 'image') %}"
      "{% generation %}[{{ p.text }}]{% endgeneration %}{% endfor %}"
      "{{ m.content | selectattr('text') | length }};{% endfor %}",
      c);
  QBC_ASSERT_OK(r);
  EXPECT_EQ(*r, "II[What is this?]1;[A cat.]1;");
  const auto bad = render("{{ messages | selectattr('role', 'gt', 'a') }}", c);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(contains(bad.status().message(), "test 'gt' is not supported"));
}

// SmolVLM-256M-Instruct's template (tests/assets/model-configs, transcribed from a copy of the
// published file) capitalizes the role and writes "<image>" for the image item; read off it:
// "User:" before an image item, "User: " before text, "<end_of_utterance>\n" after each turn.
TEST(ChatTemplate, SmolVlmTemplateCapitalizesTheRoleAndWritesTheImageMark) {
  const std::filesystem::path path = ::qbc::testing::source_dir() /
                                     "tests/assets/model-configs/SmolVLM-256M-Instruct/"
                                     "chat_template.json";
  const auto j = nlohmann::json::parse(::qbc::testing::read_file(path));
  auto t = ChatTemplate::parse(j.at("chat_template").get<std::string>(), path.string());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ChatContext ctx;
  ctx.add_generation_prompt = true;
  ChatMessage user{"user", "What is it?"};
  user.parts = {{"image", ""}, {"text", "What is it?"}};
  ctx.messages.push_back(user);
  auto r = t->render(ctx);
  QBC_ASSERT_OK(r);
  EXPECT_EQ(*r, "<|im_start|>User:<image>What is it?<end_of_utterance>\nAssistant:");
  ctx.messages[0].parts = {{"text", "hELLO"}};
  r = t->render(ctx);
  QBC_ASSERT_OK(r);
  EXPECT_EQ(*r, "<|im_start|>User: hELLO<end_of_utterance>\nAssistant:");
  auto cap = render("{{ 'aSSISTANT' | capitalize }}{{ '' | capitalize }}", chat());
  QBC_ASSERT_OK(cap);
  EXPECT_EQ(*cap, "Assistant");
}

// The processors' templates of the shared VLM folders (chat_template.json, byte copies of the
// published files) render a user turn as HF's processor.apply_chat_template does, given HF's
// content lists: the image marker where the image item is, the text after it, then the
// assistant's turn; a system message folded in each template's way. Each expected string is
// read off its template. LLaVA's renders nothing from a string content (selectattr over a
// string's characters selects none, as in Jinja), which is why run --chat gives a VLM lists.
TEST(ChatTemplate, SharedVlmTemplatesRenderAnImageTurn) {
  const char* folders[] = {"Qwen3-VL-4B-Instruct", "gemma-3-4b-it", "llava-1.5-7b-hf"};
  for (const char* f : folders) {
    QBC_REQUIRE_SHARED(path, std::string("model-configs-new/") + f + "/chat_template.json");
  }
  struct Case {
    const char* folder;
    bool system;
    int images;  // image items before the text; -1: the user's content as a plain string
    const char* want;
  };
  for (const Case& c : {
           Case{"Qwen3-VL-4B-Instruct", false, 1,
                "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe this "
                "image.<|im_end|>\n<|im_start|>assistant\n"},
           Case{"Qwen3-VL-4B-Instruct", true, 1,
                "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n<|vision_start|>"
                "<|image_pad|><|vision_end|>Describe this image.<|im_end|>\n<|im_start|>"
                "assistant\n"},
           Case{"Qwen3-VL-4B-Instruct", false, -1,
                "<|im_start|>user\nDescribe this image.<|im_end|>\n<|im_start|>assistant\n"},
           Case{"gemma-3-4b-it", false, 1,
                "<bos><start_of_turn>user\n<start_of_image>Describe this "
                "image.<end_of_turn>\n<start_of_turn>model\n"},
           Case{"gemma-3-4b-it", true, 1,
                "<bos><start_of_turn>user\nBe brief.\n\n<start_of_image>Describe this "
                "image.<end_of_turn>\n<start_of_turn>model\n"},
           Case{"llava-1.5-7b-hf", false, 1, "USER: <image>\nDescribe this image. ASSISTANT:"},
           Case{"llava-1.5-7b-hf", true, 0, "Be brief. USER: Describe this image. ASSISTANT:"},
           Case{"llava-1.5-7b-hf", false, -1, "USER: ASSISTANT:"},
       }) {
    const std::filesystem::path path =
        ::qbc::testing::shared_dir() /
        (std::string("model-configs-new/") + c.folder + "/chat_template.json");
    const auto j = nlohmann::json::parse(::qbc::testing::read_file(path));
    auto t = ChatTemplate::parse(j.at("chat_template").get<std::string>(), path.string());
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    ChatContext ctx;
    if (c.system) ctx.messages.push_back({"system", "Be brief.", {{"text", "Be brief."}}});
    ChatMessage user{"user", "Describe this image."};
    if (c.images >= 0) {
      for (int k = 0; k < c.images; ++k) user.parts.push_back({"image", ""});
      user.parts.push_back({"text", "Describe this image."});
    }
    ctx.messages.push_back(user);
    ctx.bos_token = "<bos>";
    ctx.eos_token = "<eos>";
    const auto r = t->render(ctx);
    ASSERT_TRUE(r.ok()) << c.folder << ": " << r.status().to_string();
    EXPECT_EQ(*r, c.want) << c.folder << (c.system ? " with a system message" : "") << ", "
                          << c.images << " images";
  }
}

// A namespace may not hold itself (a cycle would print forever and never be freed), and [x, x]
// doubles a value each time: printing that is an error naming the template, not a huge
// allocation.
TEST(ChatTemplate, SelfHoldingAndDoublingValuesAreRefused) {
  for (const char* t : {"{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns }}",
                        "{% set ns = namespace(a=1) %}{% set ns.a = [1, [ns]] %}{{ ns | tojson }}",
                        "{% set ns = namespace(a=1) %}{% set m = namespace(b=ns) %}"
                        "{% set ns.a = {'k': m} %}"}) {
    const auto cyc = render(t, chat());
    ASSERT_FALSE(cyc.ok()) << t;
    EXPECT_TRUE(contains(cyc.status().message(), "a namespace cannot hold itself"))
        << cyc.status().message();
  }
  const auto deep = render(
      "{% set ns = namespace(a=1) %}{% set ns.a = namespace(b=1) %}"
      "{% set ns.a.b = 2 %}",
      chat());
  EXPECT_FALSE(deep.ok());  // ns.a.b: one attribute deep only, refused at parse
  std::string doubling = "{% set ns = namespace(x='abcdefgh') %}{% for i in [";
  for (int k = 0; k < 60; ++k) doubling += k ? ",0" : "0";
  doubling += "] %}{% set ns.x = [ns.x, ns.x] %}{% endfor %}{{ ns.x }}";
  const auto big = render(doubling, chat());
  ASSERT_FALSE(big.ok());
  EXPECT_TRUE(contains(big.status().message(), "chat_template") ||
              contains(big.status().message(), "tokenizer_config.json"))
      << big.status().message();
}

}  // namespace
}  // namespace qbc::tokenizer
