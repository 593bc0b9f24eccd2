// A folder of checkpoints beside a compile's output (OUT.mxq.qbc-resume/), so that a run
// killed at any point (SIGKILL included) and started again with the same inputs picks up
// from its last finished block (docs/architecture.md, "Resume after a kill").
//
// Every checkpoint is one file written atomically (a temporary file, then renamed over the
// name) whose header holds the key it was made for and the XXH3-128 digest of its payload:
// a file cut short by a kill mid-write is never renamed into place, and one that is damaged
// anyway fails its digest and is ignored (the work is done again). The folder's
// `fingerprint` file names the inputs it belongs to; a folder of other inputs is stale and
// is emptied when opened.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "qbc/support/status.h"

namespace qbc::quant {

class CheckpointDir {
 public:
  /// Opens `dir` (created when missing) for the inputs of `fingerprint` (32 hex digits);
  /// `inputs` (JSON text) says what they were, for the `fingerprint` file. The checkpoints of
  /// another fingerprint are removed, with a note naming the folder; leftover temporaries of
  /// a killed write are removed too.
  static StatusOr<CheckpointDir> open(const std::filesystem::path& dir,
                                      const std::string& fingerprint, const std::string& inputs);

  const std::filesystem::path& path() const { return dir_; }
  const std::string& fingerprint() const { return fingerprint_; }

  /// Writes `payload` as checkpoint `name` for `key`, atomically (see above).
  Status save(const std::string& name, const std::string& key, std::string_view payload) const;
  /// The payload of checkpoint `name` when it exists, was made for `key` and its digest
  /// holds; nullopt otherwise (a damaged file is reported with a warning and ignored).
  std::optional<std::string> load(const std::string& name, const std::string& key) const;
  /// Removes checkpoint `name` (no error when it does not exist).
  void remove(const std::string& name) const;
  /// Whether the folder holds any checkpoint (beyond its fingerprint file).
  bool has_checkpoints() const;

 private:
  CheckpointDir(std::filesystem::path dir, std::string fingerprint)
      : dir_(std::move(dir)), fingerprint_(std::move(fingerprint)) {}
  std::filesystem::path dir_;
  std::string fingerprint_;
};

/// The suffix of checkpoint files ("calibrate.block-0003.ckpt").
inline constexpr const char* kCheckpointSuffix = ".ckpt";

/// Whether folder `dir` holds any checkpoint file.
bool holds_checkpoints(const std::filesystem::path& dir);

}  // namespace qbc::quant
