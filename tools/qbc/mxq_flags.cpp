// Configuration flags given with a compiled MXQ (`run`, `eval`, `verify`): the file was
// compiled for one target, so a flag naming another one is refused with both named, never
// silently ignored; flags that only a compile uses are refused too.
#include "cli.h"
#include "qbc/driver/compiled_target.h"

namespace qbc::cli {

Status check_mxq_target(const std::string& path, const mxq::LoadedModel& m, const ConfigFlags& f) {
  return driver::check_compiled_target(path, m, f.target_device, f.target_profile);
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
  return driver::check_compiled_target(path, f.target_device, f.target_profile);
}

}  // namespace qbc::cli
