// Hardware target profiles (configs/targets/*.yaml, compiled into the binary,
// or a user's file). Each number is tagged as a vendor fact or our assumption.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "compile_options.pb.h"
#include "qbc/support/status.h"

namespace qbc::config {

/// A loaded profile file.
struct TargetFile {
  std::string path;           ///< Source path ("configs/targets/aries-rb.yaml" or the user's file).
  std::string text;           ///< YAML text.
  TargetProfile profile;      ///< The numbers.
  std::map<std::string, ProvenanceNote> provenance;  ///< Key (camelCase) -> fact/assumption.
};

/// Names of the built-in profiles, sorted.
std::vector<std::string> builtin_target_names();

/// Loads a built-in profile by name, or a YAML file by path (anything with a
/// '/' or ending in .yaml/.yml/.json). Errors name the file, key and line.
StatusOr<TargetFile> load_target(const std::string& name_or_path);

/// Total NPU cores of a profile.
inline int total_cores(const TargetProfile& p) { return p.clusters() * p.cores_per_cluster(); }

}  // namespace qbc::config
