// The target a compiled MXQ was made for, held against the target a command line names: a
// compiled file is never silently run as another target.
#pragma once

#include <string>

#include "qbc/mxq/model_file.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// Refuses (kInvalidArgument naming both targets) a `target_device` (--target-device) or
/// `target_profile` (--target-profile: a profile name or file) other than the target `m`,
/// read from `path`, was compiled for; empty strings are not checked.
Status check_compiled_target(const std::string& path, const mxq::LoadedModel& m,
                             const std::string& target_device, const std::string& target_profile);

/// The same for the file at `path`, reading its metadata (the digests are not verified: the
/// run that follows does that).
Status check_compiled_target(const std::string& path, const std::string& target_device,
                             const std::string& target_profile);

}  // namespace qbc::driver
