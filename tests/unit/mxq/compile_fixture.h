// stories260K compiled in-process to MXQ for the MXQ tests: W8 llm_fast, random
// calibration, 64 positions, plus the caller's --set overrides.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/driver/backend.h"
#include "qbc/driver/model_loader.h"
#include "qbc/driver/mxq_output.h"
#include "qbc/driver/quantize.h"
#include "qbc/isa/program.h"
#include "test_support.h"

namespace qbc::testing {

struct CompiledMxq {
  std::shared_ptr<isa::Bundle> bundle;  ///< as the backend made it
  std::string bytes;                    ///< the MXQ written from it
  std::filesystem::path path;           ///< where it was written
  std::string error;                    ///< empty on success
};

/// `source` is relative to models/stories260k/ of the shared assets ("hf" or
/// "stories260K.gguf"), or an absolute path.
inline CompiledMxq compile_stories260k(const std::string& name,
                                       const std::vector<std::string>& sets,
                                       const std::string& source = "hf") {
  CompiledMxq out;
  const std::filesystem::path hf = std::filesystem::path(source).is_absolute()
                                       ? std::filesystem::path(source)
                                       : shared_dir() / "models/stories260k" / source;
  config::LoadRequest req;
  req.preset = "llm_fast";
  req.sets = {"useRandomCalib=true", "llm.attributes.maxSequenceLength=64",
              "llm.attributes.maxCacheLength=64", "calibration.numSamples=2",
              "calibration.seqLength=32"};
  req.sets.insert(req.sets.end(), sets.begin(), sets.end());
  auto run = [&]() -> Status {
    QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, config::resolve(req));
    QBC_ASSIGN_OR_RETURN(driver::LoadedModel src, driver::open_model(hf.string(), cfg));
    const std::filesystem::path dir = temp_dir() / name;
    std::filesystem::create_directories(dir);
    QBC_RETURN_IF_ERROR(
        driver::quantize_to(src, cfg, (dir / "q.mblt").string(), driver::QuantizeRun{}).status());
    QBC_ASSIGN_OR_RETURN(driver::LoadedModel q, driver::open_model((dir / "q.mblt").string(), cfg));
    QBC_ASSIGN_OR_RETURN(npu::Options o, driver::backend_options(q.graph, cfg));
    QBC_ASSIGN_OR_RETURN(isa::Bundle b, driver::compile_backend(q, o));
    out.path = dir / "q.mxq";
    QBC_RETURN_IF_ERROR(driver::write_mxq(q, b, cfg, out.path.string()).status());
    out.bundle = std::make_shared<isa::Bundle>(std::move(b));
    out.bytes = read_file(out.path);
    return ok_status();
  };
  const Status s = run();
  if (!s.ok()) out.error = s.to_string();
  return out;
}

}  // namespace qbc::testing
