// `qbc dump-config`: the resolved configuration as text (every key, its origins, or the key
// reference), and the output format the command's flags ask for.
#pragma once

#include <string>

#include "qbc/config/config.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// The output format: `format` ("yaml" or "json") when given; else "json" for an `output`
/// ending in .json and "yaml" otherwise. kInvalidArgument naming the file for json with an
/// output named .yaml or .yml.
StatusOr<std::string> dump_format(const std::string& format, const std::string& output);

/// Every key of `options` in schema order, as JSON for `format` "json" and YAML otherwise;
/// either loads back unchanged with -c.
std::string config_text(const config::CompileOptions& options, const std::string& format);

/// One line per leaf key of `cfg`: "path = value  # origin" (file:line, default, preset, --set).
std::string config_origins(const config::ResolvedConfig& cfg);

/// The Markdown key reference (types, defaults, ranges), docs/config.md's generated part.
std::string config_reference();

}  // namespace qbc::driver
