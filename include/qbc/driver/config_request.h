// The configuration a command line asks for: its presets, files, --set overrides and explicit
// flags, resolved in the documented order (defaults < target < preset < files < --set <
// flags; docs/config.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/driver/model_context.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// The configuration flags of a command (each empty / zero / false when not given).
struct ConfigRequest {
  std::string preset;              ///< --preset
  std::vector<std::string> files;  ///< -c/--config, later ones override earlier ones
  std::vector<std::string> sets;   ///< --set key.path=value
  std::string target_device;       ///< --target-device
  std::string target_profile;      ///< --target-profile: a built-in name or a YAML file
  std::string inference_scheme;    ///< --inference-scheme
  std::string seed;                ///< --seed
  std::vector<std::string> calib;  ///< --calib: calibDataPaths
  bool use_random_calib = false;   ///< --use-random-calib
  int64_t context = 0;             ///< --context: maxSequenceLength = maxCacheLength (0: not given)
  int64_t batch = 0;               ///< --batch: runtime.batchSize (0: not given)
};

/// Resolves the configuration `r` describes; its notes are logged as warnings. Errors name
/// the file, key or flag.
StatusOr<config::ResolvedConfig> resolve_request(const ConfigRequest& r);

/// resolve_request for the model at `model` (folder, config.json, .gguf or .mblt): the
/// sequence and cache lengths a preset or the defaults give are lowered to the length the
/// model was trained for (fit_lengths_to_model), read from its config.json or metadata
/// before any heavy work. `trained`, when given, receives that length.
StatusOr<config::ResolvedConfig> resolve_request_for_model(const ConfigRequest& r,
                                                           const std::string& model,
                                                           TrainedContext* trained = nullptr);

}  // namespace qbc::driver
