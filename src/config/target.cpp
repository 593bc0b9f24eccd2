#include "qbc/config/target.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "qbc/support/embedded.h"
#include "qbc/support/quote.h"
#include "schema_walk.h"

namespace qbc::config {
namespace {

bool looks_like_path(const std::string& s) {
  auto ends_with = [&](const char* suf) {
    std::string x(suf);
    return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  return s.find('/') != std::string::npos || ends_with(".yaml") || ends_with(".yml") ||
         ends_with(".json");
}

StatusOr<TargetFile> parse_target(const std::string& path, const std::string& text) {
  const bool is_json = path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  QBC_ASSIGN_OR_RETURN(YAML::Node root, detail::parse_document(text, path, is_json));
  TargetFile out;
  out.path = path;
  out.text = text;
  detail::Source src{path, true};
  if (!root.IsMap()) return invalid_argument(path, ": a target profile must be a mapping of keys");
  // Split off the provenance table; the rest is a TargetProfile.
  YAML::Node provenance;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it->first.IsScalar() && it->first.Scalar() == "provenance") provenance = it->second;
  }
  if (provenance) root.remove("provenance");
  detail::apply_defaults(out.profile, "", nullptr);
  QBC_RETURN_IF_ERROR(detail::apply_node(root, out.profile, "", src, nullptr));
  if (provenance && !provenance.IsNull()) {
    if (!provenance.IsMap()) {
      return invalid_argument(path, ":", provenance.Mark().line + 1, ": provenance must be a mapping");
    }
    for (auto it = provenance.begin(); it != provenance.end(); ++it) {
      const std::string key = it->first.Scalar();
      if (detail::find_field(TargetProfile::descriptor(), key) == nullptr) {
        return invalid_argument(path, ":", it->first.Mark().line + 1,
                                ": provenance for unknown key ", quote_prefix(key));
      }
      ProvenanceNote note;
      QBC_RETURN_IF_ERROR(detail::apply_node(it->second, note, "provenance." + key, src, nullptr));
      out.provenance[key] = note;
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> builtin_target_names() {
  std::vector<std::string> out;
  for (const embedded::File& f : embedded::targets()) {
    out.push_back(std::filesystem::path(std::string(f.path)).stem().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

StatusOr<TargetFile> load_target(const std::string& name_or_path) {
  if (!looks_like_path(name_or_path)) {
    for (const embedded::File& f : embedded::targets()) {
      if (std::filesystem::path(std::string(f.path)).stem() == name_or_path) {
        return parse_target(std::string(f.path), std::string(f.contents));
      }
    }
    std::string names;
    for (const std::string& n : builtin_target_names()) names += (names.empty() ? "" : ", ") + n;
    return not_found("unknown target profile '", name_or_path, "'; built-in profiles: ", names,
                     " (or give a path to a .yaml file)");
  }
  std::ifstream in(name_or_path, std::ios::binary);
  if (!in) return not_found(name_or_path, ": cannot open target profile file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_target(name_or_path, ss.str());
}

}  // namespace qbc::config
