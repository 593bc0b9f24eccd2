#include "qbc/driver/resume.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "qbc/quant/checkpoint.h"
#include "qbc/support/hash.h"
#include "qbc/support/logging.h"

namespace qbc::driver {
namespace {

namespace fs = std::filesystem;

/// Configuration keys no quant pass reads: changing them keeps the checkpoints.
constexpr const char* kBackendOnlyKeys[] = {"targetDevice",    "targetProfile", "target",
                                            "inferenceScheme", "splitBlocks",   "splitParts"};

}  // namespace

std::string resume_dir(const std::string& output) { return output + ".qbc-resume"; }

StatusOr<std::string> resume_fingerprint(const std::string& model_path, const LoadedModel& model,
                                         const config::ResolvedConfig& cfg,
                                         const std::string& producer, std::string* inputs) {
  nlohmann::json j;
  j["qbc"] = producer;
  j["model"] = nlohmann::json::array();
  for (const ir::SourceFile& f : model.graph.files)
    j["model"].push_back({{"bytes", f.size}, {"xxh3_128", f.xxh3_128}});
  if (is_mblt_path(model_path)) {
    QBC_ASSIGN_OR_RETURN(const std::string mblt, xxh3_128_file(model_path));
    j["mblt"] = mblt;
    std::error_code ec;
    if (fs::is_regular_file(sidecar_path(model_path), ec)) {
      QBC_ASSIGN_OR_RETURN(const std::string side, xxh3_128_file(sidecar_path(model_path)));
      j["mbltSidecar"] = side;
    }
  }
  nlohmann::json config = nlohmann::json::parse(config::to_json(cfg.options), nullptr, false);
  if (config.is_object()) {
    for (const char* k : kBackendOnlyKeys) config.erase(k);
  }
  j["config"] = config;
  *inputs = j.dump();
  return xxh3_128_bytes(inputs->data(), inputs->size());
}

ResumeFolder::~ResumeFolder() {
  if (dir_.empty()) return;
  std::error_code ec;
  fs::remove_all(fs::path(dir_) / "work", ec);
  if (!succeeded_ && quant::holds_checkpoints(dir_)) {
    log("resume").warn(
        "kept the checkpoints of the finished work in {}: the same command resumes from them "
        "(--no-resume starts over and removes them)",
        dir_);
    return;
  }
  fs::remove_all(dir_, ec);
}

}  // namespace qbc::driver
