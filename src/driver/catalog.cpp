// The presets and target profiles as the CLI lists them (see qbc/driver/catalog.h).
#include "qbc/driver/catalog.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "qbc/config/config.h"
#include "qbc/config/presets.h"
#include "qbc/config/target.h"

namespace qbc::driver {
namespace {

// A name padded to 12 columns (at least one space) before its description.
std::string padded(const std::string& name) {
  return name + std::string(name.size() < 12 ? 12 - name.size() : 1, ' ');
}

const char* kind_name(config::ProvenanceKind k) {
  return k == config::PROVENANCE_KIND_FACT     ? "fact"
         : k == config::PROVENANCE_KIND_FITTED ? "fitted"
                                               : "assumption";
}

}  // namespace

CatalogListing list_presets() {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  std::ostringstream os;
  for (const config::Preset& p : config::presets()) {
    list.push_back({{"name", p.name}, {"description", p.description}, {"path", p.path}});
    os << padded(p.name) << p.description << "\n";
  }
  return {os.str(), list.dump()};
}

StatusOr<CatalogListing> list_targets() {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  std::ostringstream os;
  for (const std::string& n : config::builtin_target_names()) {
    QBC_ASSIGN_OR_RETURN(config::TargetFile t, config::load_target(n));
    out.push_back({{"name", n},
                   {"description", t.profile.description()},
                   {"cores", config::total_cores(t.profile)},
                   {"path", t.path}});
    os << padded(n) << t.profile.description() << "\n";
  }
  return CatalogListing{os.str(), out.dump()};
}

StatusOr<CatalogListing> describe_target(const std::string& name_or_path) {
  QBC_ASSIGN_OR_RETURN(config::TargetFile t, config::load_target(name_or_path));
  config::CompileOptions o;
  *o.mutable_target() = t.profile;
  const nlohmann::ordered_json profile =
      nlohmann::ordered_json::parse(config::to_json(o))["target"];
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  std::ostringstream os;
  os << "# " << t.path << "\n";
  for (const auto& [key, value] : profile.items()) {
    auto it = t.provenance.find(key);
    std::string kind = "unspecified", note;
    if (it != t.provenance.end()) {
      kind = kind_name(it->second.kind());
      note = it->second.note();
    }
    out.push_back({{"key", key}, {"value", value}, {"kind", kind}, {"note", note}});
    os << key << ": " << value.dump() << "\n    [" << kind << "] " << note << "\n";
  }
  return CatalogListing{os.str(), out.dump()};
}

}  // namespace qbc::driver
