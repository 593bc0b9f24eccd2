// Private helpers for parsing config.json into HParams: a typed, error-reporting view of one
// JSON object, and the per-family parse hooks implemented in arch/*_hparams.cpp.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qbc/frontend/hparams.h"
#include "qbc/support/status.h"

namespace qbc::frontend::hparams_internal {

/// A read-only view of one JSON object of a config file. Every accessor returns a Status that
/// names the file and the full key path ("text_config.hidden_size") when the value is missing,
/// has the wrong JSON type or is out of range. A JSON null counts as absent.
class ConfigReader {
 public:
  ConfigReader(const nlohmann::json& object, std::string source, std::string prefix = "");

  /// True iff `key` is present and not null.
  bool has(std::string_view key) const;
  /// The raw value of `key`, or nullptr when absent or null.
  const nlohmann::json* find(std::string_view key) const;
  /// A reader for the nested object `key` (which must be an object).
  StatusOr<ConfigReader> child(std::string_view key) const;

  /// "<file>: key '<prefix><key>'", the location prefix of every message.
  std::string where(std::string_view key) const;
  /// kNotFound naming `key`.
  Status missing(std::string_view key) const;
  /// kInvalidArgument: `key` should be `expected` but holds something else.
  Status wrong_type(std::string_view key, std::string_view expected) const;
  /// kInvalidArgument: `key` has a bad value, explained by `why`.
  Status bad_value(std::string_view key, std::string_view why) const;

  StatusOr<int64_t> get_int(std::string_view key) const;
  StatusOr<int64_t> get_int_or(std::string_view key, int64_t fallback) const;
  /// A required integer > 0.
  StatusOr<int64_t> get_positive(std::string_view key) const;
  /// An optional integer > 0 (`fallback` when absent).
  StatusOr<int64_t> get_positive_or(std::string_view key, int64_t fallback) const;
  /// A required integer in [1, max]; above `max` the message names the limit.
  StatusOr<int64_t> get_bounded(std::string_view key, int64_t max) const;
  /// An optional integer in [1, max] (`fallback` when absent).
  StatusOr<int64_t> get_bounded_or(std::string_view key, int64_t fallback, int64_t max) const;
  StatusOr<double> get_double(std::string_view key) const;
  StatusOr<double> get_double_or(std::string_view key, double fallback) const;
  StatusOr<bool> get_bool_or(std::string_view key, bool fallback) const;
  StatusOr<std::string> get_string_or(std::string_view key, std::string fallback) const;

  const nlohmann::json& object() const { return *object_; }
  const std::string& source() const { return source_; }

 private:
  const nlohmann::json* object_;
  std::string source_;
  std::string prefix_;
};

/// The HF `*Config` class defaults that differ between families.
struct FamilyDefaults {
  bool tie_word_embeddings = false;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 2048;
  int64_t head_dim = 0;  ///< 0: hidden_size / num_attention_heads.
  /// When > 0, intermediate_size may be absent and defaults to this times hidden_size (EXAONE).
  int64_t intermediate_per_hidden = 0;
  /// The keys a family spells its own way (EXAONE 3.5: num_layers, layer_norm_epsilon).
  std::string_view layers_key = "num_hidden_layers";
  std::string_view eps_key = "rms_norm_eps";
};

/// Fills the fields every family shares: sizes, heads, head_dim, eps, rope theta and scaling,
/// token ids, dtype, tie_word_embeddings, attention_bias, query_scale, and one global
/// LayerAttention per layer (rope_scaled iff rope_scaling is set).
Status parse_common(const ConfigReader& cfg, const FamilyDefaults& defaults, HParams& hp);

/// Parses `rope_scaling` (absent or null → kNone) against the already-parsed `hp`.
Status parse_rope_scaling(const ConfigReader& cfg, HParams& hp);

/// Parses the activation from `key` (with `fallback` when absent).
Status parse_activation(const ConfigReader& cfg, std::string_view key, std::string_view fallback,
                        HParams& hp);

/// Applies HF `layer_types` when present ("sliding_attention" / "full_attention"), otherwise
/// `default_sliding[i]`, setting each sliding layer's window to `window` (0 keeps it global).
Status apply_layer_types(const ConfigReader& cfg, int64_t window,
                         const std::vector<bool>& default_sliding, HParams& hp);

// Per-family parse hooks: each fills `hp` from `cfg` (hp.architecture and hp.family are set).
Status parse_llama(const ConfigReader& cfg, HParams& hp);
Status parse_mistral(const ConfigReader& cfg, HParams& hp);
Status parse_qwen2(const ConfigReader& cfg, HParams& hp);
Status parse_qwen2_vl(const ConfigReader& cfg, HParams& hp);
Status parse_qwen3(const ConfigReader& cfg, HParams& hp);
Status parse_qwen3_vl(const ConfigReader& cfg, HParams& hp);
/// Qwen3-VL: hp.deepstack_layers from the top config's vision_config.
Status read_deepstack_layers(const ConfigReader& top, HParams& hp);
Status parse_gemma2(const ConfigReader& cfg, HParams& hp);
Status parse_gemma3(const ConfigReader& cfg, HParams& hp);
Status parse_phi3(const ConfigReader& cfg, HParams& hp);
Status parse_smollm3(const ConfigReader& cfg, HParams& hp);
Status parse_exaone(const ConfigReader& cfg, HParams& hp);
Status parse_exaone4(const ConfigReader& cfg, HParams& hp);
Status parse_cohere2(const ConfigReader& cfg, HParams& hp);
Status parse_hyperclovax(const ConfigReader& cfg, HParams& hp);

}  // namespace qbc::frontend::hparams_internal
