// The configuration as `qbc dump-config` prints it (see qbc/driver/config_dump.h).
#include "qbc/driver/config_dump.h"

namespace qbc::driver {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

StatusOr<std::string> dump_format(const std::string& format, const std::string& output) {
  const std::string f = !format.empty() ? format : ends_with(output, ".json") ? "json" : "yaml";
  if (!output.empty() && f == "json" && (ends_with(output, ".yaml") || ends_with(output, ".yml")))
    return invalid_argument("--format json conflicts with output file name ", output);
  return f;
}

std::string config_text(const config::CompileOptions& options, const std::string& format) {
  return format == "json" ? config::to_json(options) : config::to_yaml(options);
}

std::string config_origins(const config::ResolvedConfig& cfg) {
  return config::origins_table(cfg.options, cfg.origins);
}

std::string config_reference() { return config::reference_markdown(); }

}  // namespace qbc::driver
