// The configuration stored in a compiled MXQ (see qbc/driver/stored_config.h).
#include "qbc/driver/stored_config.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "qbc/support/file_util.h"

namespace qbc::driver {

StatusOr<config::ResolvedConfig> stored_config(const std::string& path, const mxq::LoadedModel& m) {
  const std::string& json = m.meta.config_json();
  if (json.empty()) return data_loss(path, ": the metadata holds no configuration");
  // The stored JSON is a complete configuration file: it resolves over the defaults to
  // exactly the options the file was compiled with (read back as `-c` would).
  std::string templ = (std::filesystem::temp_directory_path() / "qbc-config-XXXXXX").string();
  const int fd = mkstemp(templ.data());
  if (fd < 0) return invalid_argument(path, ": cannot create a temporary file");
  ::close(fd);
  const std::string tmp = templ + ".json";
  std::error_code ec;
  std::filesystem::rename(templ, tmp, ec);
  Status w = write_file_atomic(tmp, json);
  config::LoadRequest req;
  req.files = {tmp};
  auto cfg = w.ok() ? config::resolve(req) : StatusOr<config::ResolvedConfig>(w);
  std::filesystem::remove(tmp, ec);
  std::filesystem::remove(templ, ec);
  if (!cfg.ok())
    return data_loss(path, ": the stored configuration does not load: ", cfg.status().message());
  return cfg;
}

StatusOr<config::ResolvedConfig> stored_config(const std::string& path) {
  QBC_ASSIGN_OR_RETURN(mxq::LoadedModel m, mxq::load_model(path));
  return stored_config(path, m);
}

}  // namespace qbc::driver
