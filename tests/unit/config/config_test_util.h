// Helpers for config tests: resolve from inline YAML layers.
#pragma once

#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "test_support.h"

namespace qbc::testing {

/// Writes `yaml` to a fresh temp file with the given name and returns its path.
inline std::string config_file(const std::string& yaml, const std::string& name = "cfg.yaml") {
  std::filesystem::path p = temp_dir() / name;
  write_file(p, yaml);
  return p.string();
}

/// Resolves a request made of one inline file (may be empty) plus sets.
inline StatusOr<config::ResolvedConfig> resolve_yaml(const std::string& yaml,
                                                     std::vector<std::string> sets = {},
                                                     const std::string& preset = "") {
  config::LoadRequest req;
  req.preset = preset;
  if (!yaml.empty()) req.files.push_back(config_file(yaml));
  req.sets = std::move(sets);
  return config::resolve(req);
}

}  // namespace qbc::testing
