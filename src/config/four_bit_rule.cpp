// A preset's 4-bit weight quantizer (the `fourBitWeights` section of a preset file): the
// keys a preset sets only when weights are at 4 bits, under the user's own settings.
// See docs/config.md ("Presets").
#include "qbc/config/config.h"
#include "qbc/config/presets.h"
#include "schema_walk.h"

namespace qbc::config {
namespace {

/// Adds to `out` the leaves of `section` (a mapping for message `desc` at key path `prefix`)
/// that no user layer of `c` set, with their original nodes (so their origins keep the
/// preset file's line). Keys are matched to the schema as apply_node matches them, so the
/// user check sees the canonical path whatever the preset's spelling. Returns how many.
StatusOr<int> unset_leaves(const YAML::Node& section, const detail::pb::Descriptor* desc,
                           const std::string& prefix, const ResolvedConfig& c,
                           const std::string& file, YAML::Node* out) {
  int count = 0;
  for (const auto& kv : section) {
    const std::string key = kv.first.as<std::string>();
    const detail::pb::FieldDescriptor* f = detail::find_field(desc, key);
    if (f == nullptr)
      return internal_error(file, ": ", kFourBitSection, ": unknown key '",
                            detail::join_path(prefix, key), "'");
    const std::string path = detail::join_path(prefix, f->json_name());
    if (kv.second.IsMap()) {
      if (f->message_type() == nullptr)
        return internal_error(file, ": ", kFourBitSection, ": '", path, "' is not a section");
      YAML::Node inner(YAML::NodeType::Map);
      QBC_ASSIGN_OR_RETURN(const int n,
                           unset_leaves(kv.second, f->message_type(), path, c, file, &inner));
      if (n > 0) (*out)[key] = inner;
      count += n;
    } else if (!set_by_user(c, path)) {
      (*out)[key] = kv.second;
      ++count;
    }
  }
  return count;
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
  if (!root.IsMap()) return none;
  const YAML::Node section = root[kFourBitSection];  // const lookup: invalid when absent
  if (!section.IsDefined() || section.IsNull()) return none;
  if (!section.IsMap())
    return internal_error(preset.path, ": ", kFourBitSection, " must be a mapping of keys");
  YAML::Node kept(YAML::NodeType::Map);
  QBC_ASSIGN_OR_RETURN(const int leaves, unset_leaves(section, CompileOptions::descriptor(), "", c,
                                                      preset.path, &kept));
  if (leaves == 0) return none;
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
