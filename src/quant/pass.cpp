#include "qbc/quant/pass.h"

#include "qbc/ir/text.h"
#include "qbc/ir/verifier.h"

namespace qbc::quant {

pass::ResourceSet PassContext::available() const {
  pass::ResourceSet r = 0;
  if (samples != nullptr && num_samples > 0) r |= kCalibSamples;
  if (stats != nullptr) r |= stats_resource;
  if (fixed != nullptr) r |= kFixedWeights;
  if (rotation.decided) r |= kRotationVerdict;
  if (sink) r |= kTensorSink;
  return r;
}

std::string PassContext::describe(pass::ResourceSet resources) {
  static const std::pair<Resource, const char*> kNames[] = {
      {kCalibSamples, "calibration samples"},
      {kScaleStats, "statistics of the transformed float graph (calibrateScales)"},
      {kFinalStats, "statistics of the final graph (calibrate)"},
      {kFixedWeights, "a map for the chosen integer weights"},
      {kRotationVerdict, "the spinR1 check's verdict (spinR1Check)"},
      {kTensorSink, "a sink for the integer tensors"},
  };
  std::string out;
  for (const auto& [bit, name] : kNames) {
    if ((resources & bit) == 0) continue;
    out += (out.empty() ? "" : ", ") + std::string(name);
  }
  return out.empty() ? "nothing" : out;
}

Status PassContext::health() const { return weights->status(); }

Status PassContext::verify() const {
  QBC_RETURN_IF_ERROR(ir::verify(*graph));
  return check_rewritten_sizes(*graph, *weights);
}

StatusOr<std::string> PassContext::dump_text() const { return ir::print_text(*graph); }

void rewrite_weight(PassContext& ctx, const std::string& name, std::vector<float> values) {
  if (const ir::Weight* w = ctx.graph->find_weight(name); w != nullptr) {
    ir::Weight moved = *w;
    moved.source = ir::WeightSource::kSidecar;
    moved.tensor = name;
    moved.type.dtype = ir::DType::kF32;
    ctx.graph->add_weight(moved);
  }
  // A storage failure is sticky in the store and reported by verify() after the pass.
  (void)ctx.weights->write(name, values);
}

Status run_passes(const std::vector<std::unique_ptr<Pass>>& passes, PassContext& ctx,
                  std::vector<PassRecord>* records, const pass::Instrumentation& instr) {
  return pass::run_passes(passes, ctx, instr, records);
}

}  // namespace qbc::quant
