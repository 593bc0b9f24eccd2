// The chat template a parsed tokenizer_config.json or chat_template.json holds: HF writes
// "chat_template" as a string, or as a list of named templates whose "default" one applies.
// One rule for the compiler (which packs the template into the MXQ) and the runtime.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "qbc/support/status.h"

namespace qbc::tokenizer {

/// `j`'s "chat_template": the string, or the list form's "default" entry; nullopt when `j` has
/// no such key or it is null. kInvalidArgument naming `source` when the value is neither.
StatusOr<std::optional<std::string>> chat_template_text(const nlohmann::json& j,
                                                        const std::string& source);

}  // namespace qbc::tokenizer
