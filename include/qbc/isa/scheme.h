// The inference-scheme table (schemes.def) as C++: the enum, each scheme's traits and the
// name <-> enum mapping. Config validation, the driver, `qbc plan`, the runtime and the CLI
// read schemes only through here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace qbc::isa {

/// inferenceScheme values. A mode runs `instances` independent sequences, each on
/// `cores_per_instance` cooperating cores.
enum class Scheme : uint8_t {
#define QBC_SCHEME(e, name, per, instances, placement) e,
#include "qbc/isa/schemes.def"
#undef QBC_SCHEME
};

/// The cores a run of a scheme may be placed on.
enum class CorePlacement : uint8_t {
  kCorePerSlot,  ///< any cores, at most one per sequence slot
  kOneCluster,   ///< exactly the cores of one cluster
  kAllCores,     ///< every core of the target
};

struct SchemeInfo {
  Scheme scheme;
  const char* name;
  int32_t cores_per_instance;
  int32_t instances;  ///< 0: one per batch slot
  CorePlacement placement;
  /// The cores a target needs for this scheme.
  constexpr int32_t min_cores() const {
    return cores_per_instance * (instances > 0 ? instances : 1);
  }
  /// Instances for a compile with `batch` sequence slots.
  constexpr int32_t instances_for(int32_t batch) const { return instances > 0 ? instances : batch; }
};

inline constexpr SchemeInfo kSchemes[] = {
#define QBC_SCHEME(e, name, per, instances, placement) \
  {Scheme::e, name, per, instances, CorePlacement::placement},
#include "qbc/isa/schemes.def"
#undef QBC_SCHEME
};
inline constexpr size_t kSchemeCount = sizeof(kSchemes) / sizeof(kSchemes[0]);

constexpr const SchemeInfo& scheme_info(Scheme s) { return kSchemes[static_cast<size_t>(s)]; }
constexpr const char* scheme_name(Scheme s) { return scheme_info(s).name; }

/// The scheme spelled `name`, or nullopt.
inline std::optional<Scheme> scheme_from_name(std::string_view name) {
  for (const SchemeInfo& s : kSchemes)
    if (name == s.name) return s.scheme;
  return std::nullopt;
}

/// The names in table order joined by `sep` ("single | multi | ...").
inline std::string scheme_names(std::string_view sep) {
  std::string out;
  for (const SchemeInfo& s : kSchemes) out += std::string(out.empty() ? "" : sep) + s.name;
  return out;
}

}  // namespace qbc::isa
