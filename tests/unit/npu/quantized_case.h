// A transform case (tests/unit/quant/transform_cases.h) quantized as the backend tests compile
// it: llm_fast (W8) or configs/examples/w4v8.yaml, 64 positions, random calibration of 2
// samples of 32 tokens; written to a temporary MBLT and opened again.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/driver/model_loader.h"
#include "qbc/driver/quantize.h"
#include "test_support.h"
#include "unit/quant/transform_cases.h"

namespace qbc::testing {

/// The quantized model of case `c` (W4V8 when `w4`) and the configuration it was made with;
/// `prefix` names the temporary MBLT ("<prefix>_<case>_<w8|w4v8>.mblt").
struct QuantizedCase {
  driver::LoadedModel model;
  config::ResolvedConfig cfg;
};

/// The quantized model of case `c` with `preset` (or none), the configuration files `files`
/// (relative to the source tree) and the extra `sets` layered on it; `label` names the
/// temporary MBLT ("<prefix>_<case>_<label>.mblt").
inline StatusOr<QuantizedCase> quantize_transform_case_with(
    const TransformCase& c, const std::string& preset, const std::vector<std::string>& files,
    const std::vector<std::string>& sets, const std::string& label, const std::string& prefix) {
  QBC_ASSIGN_OR_RETURN(LoadedCase lc, load_transform_case(c, shared_dir()));
  config::LoadRequest req;
  req.preset = preset;
  for (const std::string& f : files) req.files.push_back((source_dir() / f).string());
  req.sets = {"useRandomCalib=true", "llm.attributes.maxSequenceLength=64",
              "llm.attributes.maxCacheLength=64", "calibration.numSamples=2",
              "calibration.seqLength=32"};
  req.sets.insert(req.sets.end(), sets.begin(), sets.end());
  QuantizedCase q;
  QBC_ASSIGN_OR_RETURN(q.cfg, config::resolve(req));
  QBC_ASSIGN_OR_RETURN(driver::LoadedModel src,
                       driver::open_model(lc.source->path().string(), q.cfg));
  const std::filesystem::path out = temp_dir() / (prefix + "_" + c.name + "_" + label + ".mblt");
  QBC_RETURN_IF_ERROR(
      driver::quantize_to(src, q.cfg, out.string(), driver::QuantizeRun{}).status());
  QBC_ASSIGN_OR_RETURN(q.model, driver::open_model(out.string(), q.cfg));
  return q;
}

/// The quantized model of case `c` (W4V8 when `w4`) and the configuration it was made with;
/// `prefix` names the temporary MBLT ("<prefix>_<case>_<w8|w4v8>.mblt").
inline StatusOr<QuantizedCase> quantize_transform_case(const TransformCase& c, bool w4,
                                                       const std::string& prefix) {
  if (w4)
    return quantize_transform_case_with(c, "", {"configs/examples/w4v8.yaml"}, {}, "w4v8", prefix);
  return quantize_transform_case_with(c, "llm_fast", {}, {}, "w8", prefix);
}

}  // namespace qbc::testing
