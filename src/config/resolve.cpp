// Layering of config sources: defaults < target profile < preset < files <
// --set < flags. See docs/config.md ("Precedence").
#include <filesystem>
#include <fstream>
#include <sstream>

#include "qbc/config/config.h"
#include "qbc/config/presets.h"
#include "qbc/config/target.h"
#include "qbc/support/quote.h"
#include "schema_walk.h"

namespace qbc::config {
namespace {

namespace fs = std::filesystem;

// The longest command-line layer label ("--set key=value") errors and origins show.
constexpr size_t kLabelBytes = 200;

// One parsed layer, ready to apply.
struct Layer {
  detail::Source source;
  YAML::Node root;
  std::string prefix;  // key path the root applies to ("" = top level)
};

bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

StatusOr<Layer> file_layer(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found(path, ": config file not found");
  if (fs::is_directory(path, ec)) return invalid_argument(path, ": is a directory, not a config file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path, ": cannot open config file");
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const bool is_json = has_suffix(path, ".json") ||
                       (!has_suffix(path, ".yaml") && !has_suffix(path, ".yml") &&
                        text.find_first_not_of(" \t\r\n") != std::string::npos &&
                        text[text.find_first_not_of(" \t\r\n")] == '{');
  QBC_ASSIGN_OR_RETURN(YAML::Node root, detail::parse_document(text, path, is_json));
  return Layer{{path, true}, root, ""};
}

// Builds a layer from "a.b.c=value": the value is parsed as YAML flow text, so
// lists ("[8, 16]"), booleans and numbers keep their types.
StatusOr<Layer> assignment_layer(const std::string& key, const std::string& value,
                                 const std::string& label) {
  if (key.empty()) return invalid_argument(label, ": expected key.path=value");
  YAML::Node v;
  try {
    v = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    return invalid_argument(label, ": cannot parse value ", quote_prefix(value), ": ", e.msg);
  }
  if (!v || v.IsNull()) return invalid_argument(label, ": ", key, ": no value given");
  // Nest the value under each key segment, innermost first.
  std::vector<std::string> parts;
  std::stringstream ks(key);
  for (std::string part; std::getline(ks, part, '.');) {
    if (part.empty()) return invalid_argument(label, ": malformed key path ", quote_prefix(key));
    parts.push_back(part);
  }
  if (key.back() == '.') return invalid_argument(label, ": malformed key path ", quote_prefix(key));
  YAML::Node node = v;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    YAML::Node parent(YAML::NodeType::Map);
    parent[*it] = node;
    node = parent;
  }
  return Layer{{label, false}, node, ""};
}

Status apply_layers(const std::vector<Layer>& layers, CompileOptions& opts, Origins* origins) {
  for (const Layer& l : layers) {
    QBC_RETURN_IF_ERROR(detail::apply_node(l.root, opts, l.prefix, l.source, origins));
  }
  return ok_status();
}

}  // namespace

CompileOptions defaults() {
  CompileOptions o;
  detail::apply_defaults(o, "", nullptr);
  return o;
}

std::string spell(TargetDevice v) {
  return detail::enum_spelling(TargetDevice_descriptor()->FindValueByNumber(v));
}
std::string spell(InferenceScheme v) {
  return detail::enum_spelling(InferenceScheme_descriptor()->FindValueByNumber(v));
}
std::optional<isa::Scheme> isa_scheme(InferenceScheme v) { return isa::scheme_from_name(spell(v)); }

StatusOr<ResolvedConfig> resolve(const LoadRequest& request) {
  // Parse every layer first, so a syntax error anywhere stops before any work.
  std::vector<Layer> layers;
  if (!request.preset.empty()) {
    QBC_ASSIGN_OR_RETURN(Preset preset, find_preset(request.preset));
    QBC_ASSIGN_OR_RETURN(YAML::Node root, detail::parse_document(preset.text, preset.path, false));
    // Applied after the layers, and only to 4-bit weights (apply_four_bit_rule).
    if (root.IsMap()) root.remove(kFourBitSection);
    layers.push_back(Layer{{preset.path, true}, root, ""});
  }
  for (const std::string& f : request.files) {
    QBC_ASSIGN_OR_RETURN(Layer l, file_layer(f));
    layers.push_back(std::move(l));
  }
  for (const std::string& s : request.sets) {
    const size_t eq = s.find('=');
    if (eq == std::string::npos) {
      return invalid_argument("--set ", clip_prefix(s, kLabelBytes), ": expected key.path=value");
    }
    // The label names the layer in errors and origins: clipped and escaped like a quoted value
    // (a command line may hold any bytes).
    QBC_ASSIGN_OR_RETURN(Layer l, assignment_layer(s.substr(0, eq), s.substr(eq + 1),
                                                   "--set " + clip_prefix(s, kLabelBytes)));
    layers.push_back(std::move(l));
  }
  for (const LoadRequest::Flag& f : request.flags) {
    QBC_ASSIGN_OR_RETURN(Layer l,
                         assignment_layer(f.key, f.value, clip_prefix(f.label, kLabelBytes)));
    layers.push_back(std::move(l));
  }

  // Phase 1: which target profile do the layers ask for?
  CompileOptions probe = defaults();
  QBC_RETURN_IF_ERROR(apply_layers(layers, probe, nullptr));
  const std::string profile_name =
      probe.target_profile().empty() ? spell(probe.target_device()) : probe.target_profile();

  // Phase 2: defaults < profile < layers.
  ResolvedConfig out;
  detail::apply_defaults(out.options, "", &out.origins);
  StatusOr<TargetFile> target = load_target(profile_name);
  if (!target.ok()) {
    const std::string key = probe.target_profile().empty() ? "targetDevice" : "targetProfile";
    return target.status().with_context(key);
  }
  QBC_ASSIGN_OR_RETURN(YAML::Node target_root,
                       detail::parse_document(target->text, target->path, false));
  if (target_root.IsMap()) target_root.remove("provenance");
  QBC_RETURN_IF_ERROR(
      detail::apply_node(target_root, *out.options.mutable_target(), "target",
                         detail::Source{target->path, true}, &out.origins));
  QBC_RETURN_IF_ERROR(apply_layers(layers, out.options, &out.origins));
  out.preset = request.preset;
  QBC_ASSIGN_OR_RETURN(const std::vector<std::string> four_bit, apply_four_bit_rule(out));
  if (!four_bit.empty()) out.notes.push_back(four_bit_note(out, four_bit));
  QBC_RETURN_IF_ERROR(validate(out));
  return out;
}

}  // namespace qbc::config
