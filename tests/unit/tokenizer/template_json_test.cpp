// The chat template of a parsed tokenizer_config.json / chat_template.json
// (tokenizer::chat_template_text): HF's two forms, absence, and values of neither form, which
// are refused naming the file.
#include "qbc/tokenizer/template_json.h"

#include <gtest/gtest.h>

#include <string>

namespace qbc::tokenizer {
namespace {

nlohmann::json js(const char* text) { return nlohmann::json::parse(text); }

TEST(TemplateJson, TheStringFormIsTheTemplate) {
  auto t = chat_template_text(js(R"({"chat_template": "{{ messages }}"})"), "a.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_TRUE(t->has_value());
  EXPECT_EQ(**t, "{{ messages }}");
}

TEST(TemplateJson, TheListFormTakesItsDefaultEntry) {
  auto t = chat_template_text(js(R"({"chat_template": [
      {"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"},
      {"name": "rag", "template": "R"}]})"),
                              "a.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_TRUE(t->has_value());
  EXPECT_EQ(**t, "D");
}

TEST(TemplateJson, AbsentOrNullIsNone) {
  for (const char* text : {R"({"bos_token": "<s>"})", R"({"chat_template": null})", "[1, 2]"}) {
    auto t = chat_template_text(js(text), "a.json");
    ASSERT_TRUE(t.ok()) << text << ": " << t.status().to_string();
    EXPECT_FALSE(t->has_value()) << text;
  }
}

TEST(TemplateJson, OtherValuesAreRefusedNamingTheFile) {
  for (const char* text :
       {R"({"chat_template": 7})", R"({"chat_template": [{"name": "tool_use", "template": "T"}]})",
        R"({"chat_template": [{"name": "default", "template": 3}]})",
        R"({"chat_template": {"default": "D"}})"}) {
    auto t = chat_template_text(js(text), "models/x/tokenizer_config.json");
    ASSERT_FALSE(t.ok()) << text;
    EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << text;
    EXPECT_NE(t.status().message().find("models/x/tokenizer_config.json: chat_template: expected "
                                        "a string or a list with a \"default\" entry"),
              std::string::npos)
        << t.status().to_string();
  }
}

}  // namespace
}  // namespace qbc::tokenizer
