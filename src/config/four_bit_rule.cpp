// A preset's 4-bit weight quantizer (the `fourBitWeights` section of a preset file): the
// keys a preset sets only when weights are at 4 bits, under the user's own settings.
// See docs/config.md ("Presets").
#include "qbc/config/config.h"
#include "qbc/config/presets.h"
#include "schema_walk.h"

namespace qbc::config {
namespace {

/// The leaves of `section` (a mapping at key path `prefix`) that no user layer of `c` set,
/// with their original nodes (so their origins keep the preset file's line). A null node
/// when none is left.
YAML::Node unset_leaves(const YAML::Node& section, const std::string& prefix,
                        const ResolvedConfig& c) {
  YAML::Node out(YAML::NodeType::Map);
  bool any = false;
  for (const auto& kv : section) {
    const std::string key = kv.first.as<std::string>();
    const std::string path = detail::join_path(prefix, key);
    if (kv.second.IsMap()) {
      YAML::Node inner = unset_leaves(kv.second, path, c);
      if (inner) {
        out[key] = inner;
        any = true;
      }
    } else if (!set_by_user(c, path)) {
      out[key] = kv.second;
      any = true;
    }
  }
  return any ? out : YAML::Node();
}

}  // namespace

bool has_four_bit_weights(const CompileOptions& options) {
  const ProjectionWeightBits& w = options.bit().transformer().weight();
  for (int bits : {w.query(), w.key(), w.value(), w.output(), w.ffn(), w.head()}) {
    if (bits == 4) return true;
  }
  return false;
}

StatusOr<std::vector<std::string>> apply_four_bit_rule(ResolvedConfig& c) {
  std::vector<std::string> none;
  if (c.preset.empty() || !has_four_bit_weights(c.options)) return none;
  QBC_ASSIGN_OR_RETURN(const Preset preset, find_preset(c.preset));
  QBC_ASSIGN_OR_RETURN(const YAML::Node root,
                       detail::parse_document(preset.text, preset.path, false));
  const YAML::Node section = root.IsMap() ? root[kFourBitSection] : YAML::Node();
  if (!section) return none;
  if (!section.IsMap())
    return internal_error(preset.path, ": ", kFourBitSection, " must be a mapping of keys");
  const YAML::Node kept = unset_leaves(section, "", c);
  if (!kept) return none;
  const std::vector<OriginRow> before = origin_rows(c.options, c.origins);
  QBC_RETURN_IF_ERROR(
      detail::apply_node(kept, c.options, "", detail::Source{preset.path, true}, &c.origins));
  const std::vector<OriginRow> after = origin_rows(c.options, c.origins);
  std::vector<std::string> changed;
  for (size_t i = 0; i < after.size() && i < before.size(); ++i) {
    if (after[i].value != before[i].value) changed.push_back(after[i].path + " " + after[i].value);
  }
  return changed;
}

std::string four_bit_note(const ResolvedConfig& c, const std::vector<std::string>& changed) {
  std::string keys;
  for (const std::string& k : changed) keys += (keys.empty() ? "" : ", ") + k;
  return "weights at 4 bits: preset '" + c.preset + "' adds its 4-bit weight quantizer (" + keys +
         "; its " + kFourBitSection +
         " section, docs/config.md); set these keys to choose otherwise";
}

}  // namespace qbc::config
