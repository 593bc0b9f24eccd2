// Small file helpers that return Status instead of throwing.
#pragma once

#include <string>

#include "qbc/support/status.h"

namespace qbc {

/// Reads a whole file. kNotFound names the path when it cannot be opened.
StatusOr<std::string> read_text_file(const std::string& path);

/// Writes `contents` to `path` atomically (temporary file in the same folder,
/// then rename), so a failure never leaves a partial output file.
Status write_file_atomic(const std::string& path, const std::string& contents);

}  // namespace qbc
