// Resolving a command line's configuration (see qbc/driver/config_request.h).
#include "qbc/driver/config_request.h"

#include "qbc/support/logging.h"

namespace qbc::driver {
namespace {

/// `s` as a quoted YAML scalar.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

StatusOr<config::ResolvedConfig> resolve_request(const ConfigRequest& f) {
  config::LoadRequest req;
  req.preset = f.preset;
  req.files = f.files;
  req.sets = f.sets;
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

StatusOr<config::ResolvedConfig> resolve_request_for_model(const ConfigRequest& r,
                                                           const std::string& model,
                                                           TrainedContext* trained) {
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, resolve_request(r));
  QBC_ASSIGN_OR_RETURN(const TrainedContext t, model_trained_context(model));
  const std::string note = fit_lengths_to_model(t, &cfg);
  if (!note.empty()) log("config").info("{}", note);
  if (trained != nullptr) *trained = t;
  return cfg;
}

}  // namespace qbc::driver
