// Strict JSON parsing shared by the safetensors header and index readers.
#include "safetensors_json.h"

#include "qbc/support/json_parse.h"

namespace qbc::frontend {

StatusOr<nlohmann::json> parse_json_strict(std::string_view text) {
  JsonParseOptions options;
  options.reject_duplicate_keys = true;
  return parse_json_text(text, "", options);
}

}  // namespace qbc::frontend
