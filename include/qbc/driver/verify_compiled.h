// `qbc verify`: a compiled MXQ checked for everything `qbc run` relies on, without running it
// (the reader's format rules and digests, then runtime::verify_model), and optionally against
// the target a command line names.
#pragma once

#include <string>

#include "qbc/support/status.h"

namespace qbc::driver {

/// What `qbc verify` reports of a file that passed.
struct VerifyOutcome {
  std::string summary;    ///< "FILE: ok (N files, S sections, B bytes; ...; target 'T')"
  std::string json;       ///< file, ok, parts, sections, bytes, modes, model_hash, target
  std::string json_text;  ///< the same JSON indented, as --json prints it
};

/// Reads and checks the .mxq (or manifest) at `path`: every format rule and digest, the
/// target (check_compiled_target with `target_device` / `target_profile`, unchecked when
/// empty), then the program verifier, the device checks of every mode and the host assets
/// (runtime::verify_model). The first failure, naming the file and what is wrong (exit 2).
StatusOr<VerifyOutcome> verify_compiled(const std::string& path, const std::string& target_device,
                                        const std::string& target_profile);

}  // namespace qbc::driver
