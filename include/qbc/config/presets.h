// The built-in presets (configs/presets/*.yaml, compiled into the binary).
#pragma once

#include <string>
#include <vector>

#include "qbc/support/status.h"

namespace qbc::config {

/// A built-in preset.
struct Preset {
  std::string name;         ///< "llm"
  std::string description;  ///< First comment line of the file.
  std::string path;         ///< "configs/presets/llm.yaml"
  std::string text;         ///< YAML contents.
};

/// All presets, sorted by name.
std::vector<Preset> presets();

/// The preset called `name`; kNotFound listing the valid names otherwise.
StatusOr<Preset> find_preset(const std::string& name);

}  // namespace qbc::config
