// `qbc run --chat`: a prompt rendered by the model's own chat template, as HF's
// apply_chat_template would for one user turn (with the generation prompt), so an instruct or
// VLM model sees the turn markers it was trained on (docs/cli.md "run").
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "qbc/driver/runnable.h"
#include "qbc/support/status.h"

namespace qbc::driver {

struct ChatRequest {
  std::string system;  ///< a system message first when not empty
  std::string user;    ///< the user's text
  /// Images of the turn: the user message becomes HF's content list, `images` {"type":
  /// "image"} items before the text, for which the template writes the family's marker. A
  /// VLM's messages are content lists even without images (its processor's template expects
  /// them: LLaVA's renders nothing from a string); a text model's are strings.
  size_t images = 0;
};

/// The template a JSON file holds under "chat_template" (an HF processor's chat_template.json,
/// or tokenizer_config.json): the string, or the list form's "default" entry. nullopt when the
/// key is absent or null; kInvalidArgument naming the file when it is not a JSON object or the
/// value is neither. One reader for `qbc compile` (which packs it) and `run --chat`.
StatusOr<std::optional<std::string>> read_template_json(const std::filesystem::path& file);

/// The prompt text `request` renders to with the template of `m`: a compiled .mxq's (runtime::
/// Generator::apply_chat_template), else the source's: an HF folder's chat_template.jinja,
/// chat_template.json or tokenizer_config.json `chat_template` (first found), a GGUF's
/// tokenizer.chat_template. kNotFound naming the model when it has none; the template's parse or
/// render error (file, line, column) when it is outside the supported subset.
StatusOr<std::string> render_chat_prompt(const Runnable& m, const ChatRequest& request);

}  // namespace qbc::driver
