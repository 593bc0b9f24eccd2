// Resume after a kill (docs/architecture.md, "Resume after a kill"): the checkpoint folder
// beside a compile's output, OUT.qbc-resume/, and the fingerprint of the inputs its
// checkpoints are valid for.
#pragma once

#include <string>

#include "qbc/config/config.h"
#include "qbc/driver/model_loader.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// The checkpoint folder of output `output`: "OUT.mxq.qbc-resume".
std::string resume_dir(const std::string& output);

/// The fingerprint (32 hex digits) of what a quantize run's result depends on: the qbc
/// version (`producer`), the model files (the content hashes the frontend recorded; an .mblt
/// input's own bytes and sidecar), and the effective configuration without the keys only the
/// backend reads (targetDevice, targetProfile, target, inferenceScheme, splitBlocks,
/// splitParts). The calibration data is keyed per calibration run on the samples themselves
/// (quant/calib_checkpoint.h). `inputs` receives the same as JSON, for the folder.
StatusOr<std::string> resume_fingerprint(const std::string& model_path, const LoadedModel& model,
                                         const config::ResolvedConfig& cfg,
                                         const std::string& producer, std::string* inputs);

/// Owns a run's checkpoint folder: removed when the run succeeds, or fails or is interrupted
/// (Ctrl-C, SIGTERM) before any checkpoint exists; otherwise kept and named in a warning,
/// so that the same command resumes. Its `work/` subfolder (the compile's scratch files) is
/// removed in every case. A SIGKILL leaves the folder as it is; the next run cleans it.
class ResumeFolder {
 public:
  ResumeFolder() = default;
  explicit ResumeFolder(std::string dir) : dir_(std::move(dir)) {}
  ResumeFolder(const ResumeFolder&) = delete;
  ResumeFolder& operator=(const ResumeFolder&) = delete;
  ~ResumeFolder();
  const std::string& dir() const { return dir_; }
  void succeeded() { succeeded_ = true; }

 private:
  std::string dir_;
  bool succeeded_ = false;
};

}  // namespace qbc::driver
