// Files compiled into the qbc binary (presets, target profiles), so the tool
// works from any directory without an install tree.
#pragma once

#include <string_view>
#include <vector>

namespace qbc::embedded {

/// One embedded file: its path relative to the source root, and its bytes.
struct File {
  std::string_view path;
  std::string_view contents;
};

/// Presets: configs/presets/*.yaml.
const std::vector<File>& presets();
/// Hardware target profiles: configs/targets/*.yaml.
const std::vector<File>& targets();

}  // namespace qbc::embedded
