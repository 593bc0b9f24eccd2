// Configuration flags given with a compiled MXQ (`run`, `eval`, `verify`): the file was
// compiled for one target, so a flag naming another one is refused with both named, never
// silently ignored; flags that only a compile uses are refused too.
#include <nlohmann/json.hpp>

#include "cli.h"
#include "qbc/config/target.h"

namespace qbc::cli {
namespace {

/// The targetDevice the file's stored configuration names ("" when it cannot be read).
std::string stored_device(const mxq::LoadedModel& m) {
  const auto j = nlohmann::json::parse(m.meta.config_json(), nullptr, false);
  if (!j.is_object() || !j.contains("targetDevice") || !j["targetDevice"].is_string()) return "";
  return j["targetDevice"].get<std::string>();
}

}  // namespace

Status check_mxq_target(const std::string& path, const mxq::LoadedModel& m, const ConfigFlags& f) {
  const std::string& profile = m.bundle->target;
  const std::string device = stored_device(m);
  auto refuse = [&](const std::string& flag, const std::string& asked) {
    return invalid_argument(path, " is compiled for target '", profile, "' (targetDevice '",
                            device.empty() ? "unknown" : device, "'); ", flag, " ", asked,
                            " cannot retarget a compiled file: compile the model again with ", flag,
                            " ", asked);
  };
  if (!f.target_device.empty() && f.target_device != device)
    return refuse("--target-device", f.target_device);
  if (!f.target_profile.empty()) {
    QBC_ASSIGN_OR_RETURN(config::TargetFile t, config::load_target(f.target_profile));
    if (t.profile.name() != profile) return refuse("--target-profile", f.target_profile);
  }
  return ok_status();
}

Status check_flags_for_mxq(const std::string& path, const ConfigFlags& f) {
  if (!f.calib.empty() || f.use_random_calib) {
    return invalid_argument(path,
                            " is a compiled MXQ: it was calibrated when it was compiled, "
                            "so --calib and --use-random-calib do not apply");
  }
  if (!f.inference_scheme.empty()) {
    return invalid_argument(path,
                            " is a compiled MXQ: its schemes were fixed when it was "
                            "compiled; --inference-scheme ",
                            f.inference_scheme,
                            " does not apply (choose one of the file's modes with --core-mode)");
  }
  if (f.target_device.empty() && f.target_profile.empty()) return ok_status();
  mxq::ReadOptions ro;
  ro.verify_digests = false;  // the target only; the run itself verifies the file
  QBC_ASSIGN_OR_RETURN(mxq::LoadedModel m, mxq::load_model(path, ro));
  return check_mxq_target(path, m, f);
}

}  // namespace qbc::cli
