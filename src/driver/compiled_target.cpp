// A compiled file's target against the command line's (see qbc/driver/compiled_target.h).
#include "qbc/driver/compiled_target.h"

#include <nlohmann/json.hpp>

#include "qbc/config/target.h"

namespace qbc::driver {
namespace {

/// The targetDevice the file's stored configuration names ("" when it cannot be read).
std::string stored_device(const mxq::LoadedModel& m) {
  const auto j = nlohmann::json::parse(m.meta.config_json(), nullptr, false);
  if (!j.is_object() || !j.contains("targetDevice") || !j["targetDevice"].is_string()) return "";
  return j["targetDevice"].get<std::string>();
}

}  // namespace

Status check_compiled_target(const std::string& path, const mxq::LoadedModel& m,
                             const std::string& target_device, const std::string& target_profile) {
  const std::string& profile = m.bundle->target;
  const std::string device = stored_device(m);
  auto refuse = [&](const std::string& flag, const std::string& asked) {
    return invalid_argument(path, " is compiled for target '", profile, "' (targetDevice '",
                            device.empty() ? "unknown" : device, "'); ", flag, " ", asked,
                            " cannot retarget a compiled file: compile the model again with ", flag,
                            " ", asked);
  };
  if (!target_device.empty() && target_device != device)
    return refuse("--target-device", target_device);
  if (!target_profile.empty()) {
    QBC_ASSIGN_OR_RETURN(config::TargetFile t, config::load_target(target_profile));
    if (t.profile.name() != profile) return refuse("--target-profile", target_profile);
  }
  return ok_status();
}

Status check_compiled_target(const std::string& path, const std::string& target_device,
                             const std::string& target_profile) {
  mxq::ReadOptions ro;
  ro.verify_digests = false;  // the target only; the run itself verifies the file
  QBC_ASSIGN_OR_RETURN(mxq::LoadedModel m, mxq::load_model(path, ro));
  return check_compiled_target(path, m, target_device, target_profile);
}

}  // namespace qbc::driver
