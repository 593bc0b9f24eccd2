#include "qbc/config/presets.h"

#include <algorithm>
#include <filesystem>

#include "qbc/support/embedded.h"

namespace qbc::config {

std::vector<Preset> presets() {
  std::vector<Preset> out;
  for (const embedded::File& f : embedded::presets()) {
    Preset p;
    p.path = std::string(f.path);
    p.name = std::filesystem::path(p.path).stem().string();
    p.text = std::string(f.contents);
    // The description is the first comment line: "# <description>".
    if (p.text.rfind("# ", 0) == 0) p.description = p.text.substr(2, p.text.find('\n') - 2);
    out.push_back(std::move(p));
  }
  std::sort(out.begin(), out.end(), [](const Preset& a, const Preset& b) { return a.name < b.name; });
  return out;
}

StatusOr<Preset> find_preset(const std::string& name) {
  std::string names;
  for (Preset& p : presets()) {
    if (p.name == name) return p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  return not_found("unknown preset '", name, "'; available presets: ", names);
}

}  // namespace qbc::config
