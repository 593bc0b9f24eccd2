// The chat template of a parsed JSON file (see qbc/tokenizer/template_json.h).
#include "qbc/tokenizer/template_json.h"

namespace qbc::tokenizer {

StatusOr<std::optional<std::string>> chat_template_text(const nlohmann::json& j,
                                                        const std::string& source) {
  if (!j.is_object() || !j.contains("chat_template") || j["chat_template"].is_null())
    return std::optional<std::string>();
  const nlohmann::json& t = j["chat_template"];
  if (t.is_string()) return std::optional<std::string>(t.get<std::string>());
  if (t.is_array()) {  // named templates [{"name": "default", "template": ...}, ...]
    const nlohmann::json* found = nullptr;  // the last "default", as a name -> template map
    for (const nlohmann::json& e : t) {
      if (e.is_object() && e.contains("name") && e["name"] == "default" && e.contains("template") &&
          e["template"].is_string())
        found = &e["template"];
    }
    if (found != nullptr) return std::optional<std::string>(found->get<std::string>());
  }
  return invalid_argument(source,
                          ": chat_template: expected a string or a list with a \"default\" entry");
}

}  // namespace qbc::tokenizer
