// Process exit codes of the qbc binary: the one place they are defined.
// docs/cli.md lists them for users.
#pragma once

#include "qbc/support/status.h"

namespace qbc {

inline constexpr int kExitOk = 0;           ///< Success.
inline constexpr int kExitBadInput = 2;     ///< Bad usage, config or input file.
inline constexpr int kExitUnsupported = 3;  ///< Unsupported model or feature.
inline constexpr int kExitDoesNotFit = 4;   ///< Does not fit the target (memory, tiling).
inline constexpr int kExitInternal = 70;    ///< Internal error (a bug in qbc).
/// Interrupted by Ctrl-C (128 + SIGINT); SIGTERM exits 143 (cancel::exit_code()).
inline constexpr int kExitInterrupted = 130;

/// Maps a status to the process exit code (kExitOk for OK).
int exit_code_for(const Status& status);

}  // namespace qbc
