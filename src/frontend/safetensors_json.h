// Private: strict JSON parsing for safetensors headers and index files.
#pragma once

#include <nlohmann/json.hpp>
#include <string_view>

#include "qbc/support/status.h"

namespace qbc::frontend {

/// Parses `text` as JSON, rejecting syntax errors and duplicate object keys
/// (which nlohmann would silently collapse). Never throws. On error the message
/// says what is wrong, e.g. "invalid JSON: ..." or "duplicate key 'dtype' in
/// entry 'a.weight'", without a file prefix.
StatusOr<nlohmann::json> parse_json_strict(std::string_view text);

}  // namespace qbc::frontend
