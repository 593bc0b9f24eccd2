// The configuration a compiled MXQ was made with, as the compile side reads it back.
#pragma once

#include <string>

#include "qbc/config/config.h"
#include "qbc/mxq/model_file.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// The configuration stored in `m` (read from `path`), resolved over the defaults exactly as
/// `-c` would load it. kDataLoss naming the file when it holds none or it does not load.
StatusOr<config::ResolvedConfig> stored_config(const std::string& path, const mxq::LoadedModel& m);

/// The configuration stored in the compiled file at `path`, read with its digests checked
/// (`qbc dump-config MODEL.mxq` prints it with driver::config_text). Errors name the file.
StatusOr<config::ResolvedConfig> stored_config(const std::string& path);

}  // namespace qbc::driver
