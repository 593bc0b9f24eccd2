// render_chat_prompt (qbc/driver/chat_prompt.h).
#include "qbc/driver/chat_prompt.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "qbc/runtime/generator.h"
#include "qbc/support/file_util.h"
#include "qbc/tokenizer/chat_template.h"
#include "qbc/tokenizer/template_json.h"

namespace qbc::driver {
namespace {

namespace fs = std::filesystem;

// A VLM's template is its processor's, which HF gives content lists ({"type": "text", ...});
// some (LLaVA's) render nothing from a string. A text model's template takes strings.
std::vector<tokenizer::ChatMessage> messages_of(const ChatRequest& r, bool lists) {
  std::vector<tokenizer::ChatMessage> out;
  if (!r.system.empty()) {
    out.push_back({"system", r.system});
    if (lists) out.back().parts.push_back({"text", r.system});
  }
  tokenizer::ChatMessage user{"user", r.user};
  if (lists || r.images > 0) {
    for (size_t k = 0; k < r.images; ++k) user.parts.push_back({"image", ""});
    user.parts.push_back({"text", r.user});
  }
  out.push_back(std::move(user));
  return out;
}

// Whether `m` is a VLM: a compiled file with a vision part, or a source whose config.json has
// a vision_config.
bool is_vlm(const Runnable& m) {
  if (m.generator) return m.generator->model().file.vision != nullptr;
  if (!m.graph || m.graph->source == nullptr) return false;
  const nlohmann::json j =
      nlohmann::json::parse(m.graph->source->config_json_text(), nullptr, false);
  return j.is_object() && j.contains("vision_config");
}

/// The template text of a graph model's source and where it came from; nullopt when none.
StatusOr<std::optional<std::pair<std::string, std::string>>> source_template(const LoadedModel& g) {
  using Found = std::optional<std::pair<std::string, std::string>>;
  if (g.source == nullptr) return Found();
  if (!g.source->chat_template().empty())
    return Found(
        {g.source->chat_template(), g.source->path().string() + ": tokenizer.chat_template"});
  const fs::path& tp = g.source->tokenizer_path();
  if (tp.empty()) return Found();
  const fs::path dir = tp.parent_path();
  std::error_code ec;
  if (fs::is_regular_file(dir / "chat_template.jinja", ec)) {
    QBC_ASSIGN_OR_RETURN(std::string t, read_text_file((dir / "chat_template.jinja").string()));
    return Found({std::move(t), (dir / "chat_template.jinja").string()});
  }
  for (const char* name : {"chat_template.json", "tokenizer_config.json"}) {
    const fs::path p = dir / name;
    if (!fs::is_regular_file(p, ec)) continue;
    QBC_ASSIGN_OR_RETURN(std::optional<std::string> t, read_template_json(p));
    if (t) return Found({std::move(*t), p.string() + ": chat_template"});
  }
  return Found();
}

}  // namespace

StatusOr<std::optional<std::string>> read_template_json(const fs::path& file) {
  QBC_ASSIGN_OR_RETURN(const std::string bytes, read_text_file(file.string()));
  const nlohmann::json j = nlohmann::json::parse(bytes, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument(file.string(), ": not a JSON object");
  return tokenizer::chat_template_text(j, file.string());
}

StatusOr<std::string> render_chat_prompt(const Runnable& m, const ChatRequest& request) {
  const std::vector<tokenizer::ChatMessage> messages = messages_of(request, is_vlm(m));
  if (m.generator) return m.generator->apply_chat_template(messages, true);
  if (!m.graph || !m.tok) return failed_precondition("--chat: the model has no tokenizer");
  QBC_ASSIGN_OR_RETURN(const auto found, source_template(*m.graph));
  if (!found)
    return not_found(m.graph->source ? m.graph->source->path().string() : std::string("the model"),
                     ": has no chat template (chat_template.jinja, chat_template.json or "
                     "tokenizer_config.json's chat_template); run without --chat");
  QBC_ASSIGN_OR_RETURN(const tokenizer::ChatTemplate t,
                       tokenizer::ChatTemplate::parse(found->first, found->second));
  tokenizer::ChatContext ctx;
  ctx.messages = messages;
  ctx.add_generation_prompt = true;
  ctx.bos_token = m.tok->token_text(m.tok->bos_id());
  ctx.eos_token = m.tok->token_text(m.tok->eos_id());
  return t.render(ctx);
}

}  // namespace qbc::driver
