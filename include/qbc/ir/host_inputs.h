// Names of the graph inputs the host feeds besides `inputs_embeds` and `positions`: one place
// for the spelling every reader of a language graph matches (frontend, calibration, spinR1,
// the float and fake-quant sessions, the backend's planner).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace qbc::ir {

/// Qwen3-VL's DeepStack rows: input `deepstack.J` [b, s, hidden] is added to the residual
/// stream after decoder block J (docs/multimodal.md).
inline constexpr std::string_view kDeepStackInputPrefix = "deepstack.";

/// The name of DeepStack level `level`'s input: "deepstack.0", "deepstack.1", ...
inline std::string deepstack_input_name(int64_t level) {
  return std::string(kDeepStackInputPrefix) + std::to_string(level);
}

/// True for a name of the DeepStack spelling ("deepstack." then anything: deepstack_level()
/// says whether it is a valid level).
inline bool is_deepstack_input(std::string_view name) {
  return name.substr(0, kDeepStackInputPrefix.size()) == kDeepStackInputPrefix;
}

/// The level of a DeepStack input's name ("deepstack.2" -> 2); -1 for any other name.
inline int64_t deepstack_level(std::string_view name) {
  if (!is_deepstack_input(name) || name.size() == kDeepStackInputPrefix.size()) return -1;
  int64_t level = 0;
  for (char c : name.substr(kDeepStackInputPrefix.size())) {
    if (c < '0' || c > '9' || level > 1000000) return -1;
    level = level * 10 + (c - '0');
  }
  return level;
}

}  // namespace qbc::ir
