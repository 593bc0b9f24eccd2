// Strict JSON parsing shared by the safetensors header and index readers.
#include "safetensors_json.h"

#include <set>
#include <string>
#include <vector>

namespace qbc::frontend {

StatusOr<nlohmann::json> parse_json_strict(std::string_view text) {
  using Json = nlohmann::json;
  // One key set per open object; objects inside arrays get their own set too.
  std::vector<std::set<std::string>> open_objects;
  std::string top_level_key;  // The entry being parsed, for messages.
  std::string duplicate;
  std::string duplicate_parent;
  auto callback = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) -> bool {
    switch (event) {
      case Json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case Json::parse_event_t::key: {
        if (open_objects.empty() || !parsed.is_string()) break;
        const std::string& key = parsed.get_ref<const std::string&>();
        if (open_objects.size() == 1) top_level_key = key;
        if (!open_objects.back().insert(key).second && duplicate.empty()) {
          duplicate = key;
          duplicate_parent = open_objects.size() == 1 ? "" : top_level_key;
        }
        break;
      }
      default:
        break;
    }
    return true;
  };
  Json result;
  try {
    result = Json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true,
                         /*ignore_comments=*/false);
  } catch (const Json::exception& e) {
    return invalid_argument("invalid JSON: ", e.what());
  } catch (const std::exception& e) {  // e.g. std::bad_alloc on absurd input
    return invalid_argument("cannot parse JSON: ", e.what());
  }
  if (!duplicate.empty()) {
    if (duplicate_parent.empty()) return invalid_argument("duplicate key '", duplicate, "'");
    return invalid_argument("duplicate key '", duplicate, "' in entry '", duplicate_parent, "'");
  }
  return result;
}

}  // namespace qbc::frontend
