#include <cstdio>

#include "cli.h"
#include "qbc/driver/runnable.h"
#include "qbc/support/file_util.h"
#include "qbc/support/logging.h"

namespace qbc::cli {

void add_config_flags(CLI::App& cmd, ConfigFlags& f) {
  cmd.add_option("--preset", f.preset, "Start from a built-in preset (see `qbc presets`)")
      ->group("Configuration");
  cmd.add_option("-c,--config", f.files,
                 "Config file (YAML or JSON); repeatable, later files override earlier ones")
      ->group("Configuration");
  cmd.add_option(
         "--set", f.sets,
         "Override one key: key.path=value (YAML value, e.g. splitBlocks=[8,16]); repeatable")
      ->group("Configuration");
  cmd.add_option("--target-device", f.target_device, "Explicit targetDevice: aries-rb | regulus-rb")
      ->group("Configuration");
  cmd.add_option("--target-profile", f.target_profile,
                 "Explicit targetProfile: built-in name or YAML file (see `qbc targets`)")
      ->group("Configuration");
  cmd.add_option("--inference-scheme", f.inference_scheme,
                 "Explicit inferenceScheme: " + isa::scheme_names(" | ") + " | all")
      ->group("Configuration");
  cmd.add_option("--seed", f.seed, "Explicit seed for every random choice")->group("Configuration");
  cmd.add_option("--calib", f.calib, "Calibration data path (sets calibDataPaths); repeatable")
      ->group("Configuration");
  cmd.add_flag("--use-random-calib", f.use_random_calib, "Calibrate on random data (smoke tests)")
      ->group("Configuration");
}

void add_context_flags(CLI::App& cmd, ConfigFlags& f) {
  cmd.add_option("--context", f.context,
                 "Explicit llm.attributes.maxSequenceLength = maxCacheLength (positions per "
                 "sequence; default: the preset's, or the model's trained length when shorter)")
      ->check(CLI::PositiveNumber)
      ->group("Configuration");
  cmd.add_option("--batch", f.batch, "Explicit llm.attributes.runtime.batchSize")
      ->check(CLI::PositiveNumber)
      ->group("Configuration");
}

StatusOr<config::ResolvedConfig> resolve_config(const ConfigFlags& f) {
  return driver::resolve_request(f);
}

StatusOr<config::ResolvedConfig> resolve_for_model(const ConfigFlags& flags,
                                                   const std::string& model,
                                                   driver::TrainedContext* trained) {
  return driver::resolve_request_for_model(flags, model, trained);
}

StatusOr<config::ResolvedConfig> resolve_for_input(const ConfigFlags& flags,
                                                   const std::string& model) {
  if (!driver::is_compiled_model(model)) return resolve_for_model(flags, model);
  QBC_RETURN_IF_ERROR(check_flags_for_mxq(model, flags));
  return resolve_config(flags);
}

Status emit_output(const std::string& path, const std::string& text) {
  if (path.empty() || path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return ok_status();
  }
  QBC_RETURN_IF_ERROR(write_file_atomic(path, text));
  log("cli").info("wrote {}", path);
  return ok_status();
}

}  // namespace qbc::cli
