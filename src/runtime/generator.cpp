// The runtime's host side (see qbc/runtime/generator.h).
#include "qbc/runtime/generator.h"

#include <nlohmann/json.hpp>

#include "qbc/support/json_parse.h"
#include "qbc/tokenizer/text_stream.h"

namespace qbc::runtime {
namespace {

std::string file_name(const mxq::LoadedModel& file) {
  return file.files.empty() ? std::string("the model") : file.files.front();
}

std::string_view asset_text(const mxq::LoadedModel& file, const char* name) {
  const mxq::HostAsset* a = file.asset(name);
  return a == nullptr ? std::string_view() : std::string_view(a->bytes);
}

}  // namespace

StatusOr<tokenizer::Tokenizer> load_tokenizer(const mxq::LoadedModel& file) {
  const std::string name = file_name(file);
  if (file.asset("tokenizer.json") != nullptr) {
    return tokenizer::Tokenizer::from_hf_json_text(
        asset_text(file, "tokenizer.json"), asset_text(file, "tokenizer_config.json"),
        asset_text(file, "config.json"), name + ": asset tokenizer.json");
  }
  if (file.asset("qbc_vocab.json") != nullptr) {
    return tokenizer::Tokenizer::from_vocab_json(asset_text(file, "qbc_vocab.json"),
                                                 name + ": asset qbc_vocab.json");
  }
  return not_found(name,
                   ": carries no tokenizer (no tokenizer.json or qbc_vocab.json asset; "
                   "recompile it with a qbc that writes them)");
}

StatusOr<std::optional<tokenizer::ChatTemplate>> load_chat_template(const mxq::LoadedModel& file) {
  const std::string name = file_name(file);
  if (file.asset("chat_template.jinja") != nullptr) {
    QBC_ASSIGN_OR_RETURN(tokenizer::ChatTemplate t,
                         tokenizer::ChatTemplate::parse(asset_text(file, "chat_template.jinja"),
                                                        name + ": asset chat_template.jinja"));
    return std::optional<tokenizer::ChatTemplate>(std::move(t));
  }
  const std::string_view config = asset_text(file, "tokenizer_config.json");
  if (config.empty()) return std::optional<tokenizer::ChatTemplate>();
  const std::string source = name + ": asset tokenizer_config.json";
  QBC_ASSIGN_OR_RETURN(const nlohmann::json j, parse_json_text(config, source));
  if (!j.is_object() || !j.contains("chat_template"))
    return std::optional<tokenizer::ChatTemplate>();
  const nlohmann::json& t = j["chat_template"];
  if (t.is_null()) return std::optional<tokenizer::ChatTemplate>();
  const nlohmann::json* text = t.is_string() ? &t : nullptr;
  if (t.is_array()) {  // named templates [{"name": "default", "template": ...}, ...]
    for (const nlohmann::json& e : t) {
      if (e.is_object() && e.contains("name") && e["name"] == "default" && e.contains("template") &&
          e["template"].is_string())
        text = &e["template"];
    }
  }
  if (text == nullptr)
    return invalid_argument(source,
                            ": chat_template: expected a string or a list with a \"default\" "
                            "entry");
  QBC_ASSIGN_OR_RETURN(tokenizer::ChatTemplate c,
                       tokenizer::ChatTemplate::parse(text->get_ref<const std::string&>(),
                                                      source + ": chat_template"));
  return std::optional<tokenizer::ChatTemplate>(std::move(c));
}

StatusOr<std::unique_ptr<Generator>> Generator::create(const std::string& path,
                                                       const LoadOptions& options) {
  QBC_ASSIGN_OR_RETURN(Model m, load_model(path, options));
  return create(std::move(m));
}

StatusOr<std::unique_ptr<Generator>> Generator::create(Model model) {
  QBC_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, load_tokenizer(model.file));
  StatusOr<std::optional<tokenizer::ChatTemplate>> chat = load_chat_template(model.file);
  QBC_ASSIGN_OR_RETURN(std::unique_ptr<NpuSession> s, NpuSession::create(model.device, 0));
  std::unique_ptr<Generator> g(new Generator(std::move(model), std::move(tok)));
  if (chat.ok()) {
    g->chat_template_ = std::move(chat).value();
  } else {
    g->chat_template_error_ = chat.status();
  }
  g->session_ = std::move(s);
  return g;
}

std::vector<int32_t> Generator::encode(std::string_view text) const {
  return tokenizer_.encode(text, tokenizer_.add_bos_default());
}

std::string Generator::decode(const std::vector<int32_t>& ids) const {
  return tokenizer_.decode(ids);
}

std::string Generator::decode_continuation(const std::vector<int32_t>& prompt,
                                           const std::vector<int32_t>& ids) const {
  return tokenizer::decode_continuation(tokenizer_, prompt, ids);
}

StatusOr<std::vector<float>> Generator::embed(const std::vector<int32_t>& tokens) const {
  std::vector<float> out;
  QBC_RETURN_IF_ERROR(session_->embed(tokens, &out));
  return out;
}

StatusOr<std::string> Generator::apply_chat_template(
    const std::vector<tokenizer::ChatMessage>& messages, bool add_generation_prompt) const {
  if (!chat_template_error_.ok()) return chat_template_error_;
  if (!chat_template_)
    return not_found(file_name(model_.file),
                     ": carries no chat template (no chat_template.jinja asset and no "
                     "chat_template in tokenizer_config.json)");
  tokenizer::ChatContext ctx;
  ctx.messages = messages;
  ctx.add_generation_prompt = add_generation_prompt;
  ctx.bos_token = tokenizer_.token_text(tokenizer_.bos_id());
  ctx.eos_token = tokenizer_.token_text(tokenizer_.eos_id());
  return chat_template_->render(ctx);
}

StatusOr<runner::GenerateResult> Generator::generate(const std::vector<int32_t>& prompt,
                                                     int max_new,
                                                     const runner::SamplingOptions& sampling,
                                                     const std::function<void(int32_t)>& on_token,
                                                     bool ignore_eos) {
  session_->reset();
  return runner::generate(*session_, prompt, max_new, sampling, tokenizer_.eos_id(), ignore_eos,
                          capacity(), on_token);
}

StatusOr<std::string> Generator::generate_text(std::string_view prompt, int max_new,
                                               const runner::SamplingOptions& sampling) {
  const std::vector<int32_t> ids = encode(prompt);
  QBC_ASSIGN_OR_RETURN(runner::GenerateResult r, generate(ids, max_new, sampling));
  return decode_continuation(ids, r.tokens);
}

}  // namespace qbc::runtime
