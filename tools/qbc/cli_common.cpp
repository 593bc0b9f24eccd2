#include <cstdio>

#include "cli.h"
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
  config::LoadRequest req;
  req.preset = f.preset;
  req.files = f.files;
  req.sets = f.sets;
  auto quoted = [](const std::string& s) {
    std::string out = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
    return out + "\"";
  };
  if (!f.target_device.empty())
    req.flags.push_back({"targetDevice", f.target_device, "--target-device"});
  if (!f.target_profile.empty()) {
    req.flags.push_back({"targetProfile", quoted(f.target_profile), "--target-profile"});
  }
  if (!f.inference_scheme.empty()) {
    req.flags.push_back({"inferenceScheme", f.inference_scheme, "--inference-scheme"});
  }
  if (!f.seed.empty()) req.flags.push_back({"seed", f.seed, "--seed"});
  if (!f.calib.empty()) {
    std::string list = "[";
    for (size_t i = 0; i < f.calib.size(); ++i) list += (i ? ", " : "") + quoted(f.calib[i]);
    req.flags.push_back({"calibDataPaths", list + "]", "--calib"});
  }
  if (f.use_random_calib) req.flags.push_back({"useRandomCalib", "true", "--use-random-calib"});
  if (f.context > 0) {
    const std::string n = std::to_string(f.context);
    req.flags.push_back({"llm.attributes.maxSequenceLength", n, "--context"});
    req.flags.push_back({"llm.attributes.maxCacheLength", n, "--context"});
  }
  if (f.batch > 0) {
    req.flags.push_back({"llm.attributes.runtime.batchSize", std::to_string(f.batch), "--batch"});
  }
  StatusOr<config::ResolvedConfig> cfg = config::resolve(req);
  if (!cfg.ok()) return cfg.status();
  for (const std::string& note : cfg->notes) log("config").warn("{}", note);
  return cfg;
}

StatusOr<config::ResolvedConfig> resolve_for_model(const ConfigFlags& flags,
                                                   const std::string& model,
                                                   driver::TrainedContext* trained) {
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, resolve_config(flags));
  QBC_ASSIGN_OR_RETURN(const driver::TrainedContext t, driver::model_trained_context(model));
  const std::string note = driver::fit_lengths_to_model(t, &cfg);
  if (!note.empty()) log("config").info("{}", note);
  if (trained != nullptr) *trained = t;
  return cfg;
}

StatusOr<config::ResolvedConfig> resolve_for_input(const ConfigFlags& flags,
                                                   const std::string& model) {
  if (!mxq::is_mxq_file(model)) return resolve_for_model(flags, model);
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
