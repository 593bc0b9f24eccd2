// Loading, layering and validating qbc's configuration (CompileOptions).
//
// Precedence, lowest first: built-in defaults (proto annotations) < target
// profile (configs/targets/) < preset (configs/presets/) < config files (-c, in
// order) < --set key.path=value (in order) < explicit command-line flags. Every
// leaf key remembers where its value came from, so errors can name the file and
// line.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compile_options.pb.h"
#include "qbc/isa/scheme.h"
#include "qbc/support/status.h"

namespace qbc::config {

/// Where a value came from: a source label plus an optional 1-based line/column.
struct Origin {
  std::string source;  ///< "default", "preset 'llm' (configs/presets/llm.yaml)", "cfg.yaml", "--set ..."
  int line = 0;        ///< 1-based; 0 when the source has no lines.
  int column = 0;      ///< 1-based; 0 when unknown.
  /// "source:line:column", or just "source" without a line.
  std::string to_string() const;
};

/// Key path ("llm.attributes.maxSequenceLength") -> origin of its current value.
using Origins = std::map<std::string, Origin>;

/// What to resolve: the layers above the defaults, in precedence order.
struct LoadRequest {
  std::string preset;              ///< Preset name, or empty for none.
  std::vector<std::string> files;  ///< Config files (YAML or JSON), applied in order.
  std::vector<std::string> sets;   ///< "key.path=value" overrides, applied in order.
  /// Explicit flags, applied last: {key path, YAML value text, flag label such as "--seed"}.
  struct Flag {
    std::string key;
    std::string value;
    std::string label;
  };
  std::vector<Flag> flags;
};

/// A fully resolved, validated configuration.
struct ResolvedConfig {
  CompileOptions options;
  Origins origins;
  /// Adjustments and warnings the user should see (e.g. a scheme set automatically).
  std::vector<std::string> notes;
  /// The built-in preset the layers started from ("llm"), or "" for none.
  std::string preset;
};

/// True when key `path` (e.g. "inferenceScheme") kept its built-in default: no layer set it.
bool is_default(const ResolvedConfig& c, const std::string& path);

/// True when key `path` was set by the user: a config file, --set or a flag, not the
/// built-in default, a preset or a rule.
bool set_by_user(const ResolvedConfig& c, const std::string& path);

/// Resolves the layers of `request` over the defaults and validates the result.
/// Errors (kInvalidArgument, kNotFound, kUnimplemented) name the key path and
/// the file, line and column it came from. No work should start on error.
StatusOr<ResolvedConfig> resolve(const LoadRequest& request);

/// Returns CompileOptions with every key at its built-in default.
CompileOptions defaults();

/// The section of a preset file that applies only when weights are at 4 bits
/// ("fourBitWeights", docs/config.md "Presets"): not a configuration key itself.
inline constexpr const char* kFourBitSection = "fourBitWeights";

/// True when any projection or head weight of `options` is at 4 bits.
bool has_four_bit_weights(const CompileOptions& options);

/// The preset's 4-bit weight quantizer: when `c` has 4-bit weights and its preset has a
/// `fourBitWeights` section, sets each key of that section that no config file, --set or
/// flag set (those keep the user's value), with the preset file's line as the origin.
/// Returns the keys whose value it changed, as "path value". resolve() applies it; a stage
/// that sets bits after resolving (bits by budget) applies it again. Errors only for a
/// malformed preset.
StatusOr<std::vector<std::string>> apply_four_bit_rule(ResolvedConfig& c);
/// The note resolve() adds for what apply_four_bit_rule changed (`changed` non-empty).
std::string four_bit_note(const ResolvedConfig& c, const std::vector<std::string>& changed);

/// Cross-field checks on a resolved config (ranges and types are checked while
/// loading). May append notes and adjust `config` (e.g. the batch-LLM scheme).
Status validate(ResolvedConfig& config);

/// Every key in schema order as YAML, including defaults; loads back unchanged.
std::string to_yaml(const CompileOptions& options);
/// Every key in schema order as JSON (2-space indent); loads back unchanged.
std::string to_json(const CompileOptions& options);
/// One leaf key of a configuration with its value (as YAML text) and where it came from.
struct OriginRow {
  std::string path;    ///< "quantization.weightBits"
  std::string value;   ///< the value as dump-config prints it
  std::string origin;  ///< Origin::to_string(), or "default" when no layer set the key
};
/// Every leaf key in schema order with its value and origin.
std::vector<OriginRow> origin_rows(const CompileOptions& options, const Origins& origins);
/// One line per leaf key: "path = value  # origin".
std::string origins_table(const CompileOptions& options, const Origins& origins);
/// The key reference (docs/config.md's generated part) as Markdown.
std::string reference_markdown();

/// Returns the enum value's config spelling ("aries-rb").
std::string spell(TargetDevice v);
std::string spell(InferenceScheme v);
/// The row of the scheme table (qbc/isa/schemes.def) that `v` spells; nullopt for
/// INFERENCE_SCHEME_ALL and UNSPECIFIED (which name no single scheme).
std::optional<isa::Scheme> isa_scheme(InferenceScheme v);

}  // namespace qbc::config
