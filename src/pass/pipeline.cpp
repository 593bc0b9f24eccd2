#include "qbc/pass/pipeline.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace qbc::pass {

bool contains_pass(const std::vector<PipelineEntry>& entries, const std::string& name) {
  return std::any_of(entries.begin(), entries.end(),
                     [&](const PipelineEntry& e) { return e.pass == name; });
}

std::string format_pipeline(const std::string& stage, const std::vector<PipelineEntry>& entries,
                            const std::vector<std::string>& disabled) {
  size_t name_w = 4, key_w = 10;
  for (const PipelineEntry& e : entries) {
    name_w = std::max(name_w, e.pass.size());
    key_w = std::max(key_w, e.enabled_by.size());
  }
  std::string out = stage + " pipeline, " + std::to_string(entries.size()) + " passes in order:\n";
  char line[1024];
  std::snprintf(line, sizeof(line), "  %2s  %-*s  %-*s  %s\n", "#", static_cast<int>(name_w),
                "pass", static_cast<int>(key_w), "enabled by", "why");
  out += line;
  for (size_t i = 0; i < entries.size(); ++i) {
    const PipelineEntry& e = entries[i];
    const bool off = std::find(disabled.begin(), disabled.end(), e.pass) != disabled.end();
    std::snprintf(line, sizeof(line), "  %2zu  %-*s  %-*s  %s%s\n", i + 1, static_cast<int>(name_w),
                  e.pass.c_str(), static_cast<int>(key_w), e.enabled_by.c_str(),
                  off ? "(disabled by --disable-pass) " : "", e.why.c_str());
    out += line;
  }
  return out;
}

std::string pipeline_json(const std::vector<PipelineEntry>& entries,
                          const std::vector<std::string>& disabled) {
  nlohmann::json j = nlohmann::json::array();
  for (const PipelineEntry& e : entries) {
    const bool off = std::find(disabled.begin(), disabled.end(), e.pass) != disabled.end();
    j.push_back(
        {{"pass", e.pass}, {"enabled_by", e.enabled_by}, {"why", e.why}, {"disabled", off}});
  }
  return j.dump();
}

}  // namespace qbc::pass
