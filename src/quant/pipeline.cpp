// The quant pipeline as data. Each row: the pass, the configuration key that puts it in
// the pipeline, and why it runs where it does. Order matters; the reasons say how.
#include "qbc/quant/pipeline.h"

#include <algorithm>

#include "qbc/quant/norm_smooth.h"
#include "qbc/quant/quantize.h"
#include "qbc/quant/stage_passes.h"
#include "qbc/quant/transforms.h"
#include "qbc/quant/weight_passes.h"
#include "qbc/support/logging.h"

namespace qbc::quant {
namespace {

using Options = config::CompileOptions;

/// One row of the pipeline table.
struct Stage {
  const char* pass;
  const char* key;
  bool (*enabled)(const Options&);
  const char* why;
};

const auto& et(const Options& o) { return o.equivalent_transformation(); }
bool check_rotation(const Options& o) {
  return et(o).spin_r1().apply() && et(o).spin_r1().policy() == config::ROTATION_POLICY_IF_BETTER;
}
bool any_scale_migration(const Options& o) {
  return et(o).qk().apply() || et(o).vo().apply() || et(o).ud().apply() ||
         et(o).norm_smooth().apply();
}
bool second_images(const Options& o) { return phase_weight_keys(o).has_value(); }
bool always(const Options&) { return true; }

// clang-format off
const Stage kPipeline[] = {
    // 1. Equivalence transforms of the float model, before any statistics are taken.
    {"spinR1Check", "equivalentTransformation.spinR1.policy: ifBetter", check_rotation,
     "measures the float model first; normConv and spinR1 then run only if the rotation lowers the RTN output error"},
    {"normConv", "equivalentTransformation.normConv.apply", [](const Options& o) { return et(o).norm_conv().apply(); },
     "folds RMSNorm gains into the linears; spinR1 needs unit-gain norms"},
    {"spinR1", "equivalentTransformation.spinR1.apply", [](const Options& o) { return et(o).spin_r1().apply(); },
     "rotates the residual stream (and the embedding input) before calibration sees the model"},
    {"spinR2", "equivalentTransformation.spinR2.apply", [](const Options& o) { return et(o).spin_r2().apply(); },
     "rotates V heads / o_proj inputs; independent of the residual stream"},
    {"qkRotation", "equivalentTransformation.qkRotation.apply", [](const Options& o) { return et(o).qk_rotation().apply(); },
     "chosen on weight error alone, needs no statistics"},
    {"optimizeFfn", "equivalentTransformation.optimizeFfn.apply", [](const Options& o) { return et(o).optimize_ffn().apply(); },
     "a documented no-op: its meanings are backend lowering decisions"},
    // 2. Scale migrations: one calibration of the transformed float model serves all of
    // them, because each reads statistics of values the others do not change.
    {"calibrateScales", "equivalentTransformation.{qk,vo,ud,normSmooth}.apply", any_scale_migration,
     "statistics of the transformed float model for the scale migrations"},
    {"qk", "equivalentTransformation.qk.apply", [](const Options& o) { return et(o).qk().apply(); },
     "post-RoPE q/k statistics"},
    {"vo", "equivalentTransformation.vo.apply", [](const Options& o) { return et(o).vo().apply(); },
     "attention-output statistics"},
    {"ud", "equivalentTransformation.ud.apply", [](const Options& o) { return et(o).ud().apply(); },
     "down_proj-input statistics"},
    {"normSmooth", "equivalentTransformation.normSmooth.apply", [](const Options& o) { return et(o).norm_smooth().apply(); },
     "norm-output statistics"},
    // 3. Passes that choose the integer weights, block by block on the calibration set.
    {"searchWeightScale", "searchWeightScale.apply", [](const Options& o) { return o.search_weight_scale().apply(); },
     "first: GPTQ then quantizes the weights it rescaled"},
    {"phaseImages", "bit.prefill.weight / bit.decode.weight", second_images,
     "rounds the second weight image from the float weights, before hessianQuant replaces them"},
    {"hessianQuant", "hessianQuant.apply", [](const Options& o) { return o.hessian_quant().apply(); },
     "its integers replace the search's for the linears both cover"},
    // 4. The fixed stages: statistics of the final model, then its integers and scales.
    {"calibrate", "always", always,
     "activation statistics of the final model, with the chosen weights"},
    {"quantizeRtn", "always", always,
     "integer weights (the chosen ones, else round to nearest), activation and KV scales; the graph becomes the quantized one"},
};
// clang-format on

/// The passes spinR1.policy ifBetter gates on the check's verdict.
bool gated(const Options& o) { return check_rotation(o); }

template <class Make>
PassRegistry::Factory maybe_gated(Make make) {
  return [make](const Options& o) -> StatusOr<std::unique_ptr<Pass>> {
    std::unique_ptr<Pass> p = make(o);
    return gated(o) ? gate_on_rotation(std::move(p)) : std::move(p);
  };
}

template <class Make>
PassRegistry::Factory plain(Make make) {
  return [make](const Options& o) -> StatusOr<std::unique_ptr<Pass>> { return make(o); };
}

}  // namespace

void register_quant_passes(PassRegistry& r) {
  const auto spin_seed = [](const Options& o) {
    return static_cast<uint64_t>(et(o).spin_r1().seed());
  };
  r.add("spinR1Check", "measure whether spinR1 lowers the round-to-nearest output error",
        plain([spin_seed](const Options& o) { return make_rotation_check(spin_seed(o)); }));
  r.add("normConv", "fold RMSNorm gains into the linears they feed",
        maybe_gated([](const Options&) { return make_norm_conv(); }));
  r.add("spinR1", "rotate the residual stream by a seeded random Hadamard",
        maybe_gated([spin_seed](const Options& o) { return make_spin_r1(spin_seed(o)); }));
  r.add("spinR2", "rotate each V head's output and the matching o_proj inputs",
        plain([](const Options& o) {
          return make_spin_r2(static_cast<uint64_t>(et(o).spin_r2().seed()));
        }));
  r.add("qkRotation", "rotate q/k channel pairs (commuting with RoPE) to lower their weight error",
        plain([](const Options&) { return make_qk_rotation(); }));
  r.add("optimizeFfn", "no-op (a backend lowering concern)",
        plain([](const Options&) { return make_optimize_ffn(); }));
  r.add("calibrateScales", "activation statistics for the scale migrations",
        plain([](const Options&) { return make_calibrate(/*for_scales=*/true); }));
  r.add("qk", "migrate scale between q and k",
        plain([](const Options&) { return make_qk_scale(); }));
  r.add("vo", "migrate scale between v and o_proj",
        plain([](const Options&) { return make_vo_scale(); }));
  r.add("ud", "migrate scale between up_proj and down_proj",
        plain([](const Options& o) { return make_ud_scale(et(o).ud().smoothing_factor()); }));
  r.add("normSmooth", "migrate scale from norm outputs into the linears they feed",
        plain([](const Options& o) {
          return make_norm_smooth(et(o).norm_smooth().smoothing_factor());
        }));
  r.add("searchWeightScale", "AWQ-style per-channel scale and clip search",
        plain([](const Options& o) { return make_search_weight_scale(o.search_weight_scale()); }));
  r.add("phaseImages", "round each linear's second weight image (bit.prefill / bit.decode)",
        plain([](const Options&) { return make_phase_images(); }));
  r.add("hessianQuant", "GPTQ",
        plain([](const Options& o) { return make_hessian_quant(o.hessian_quant()); }));
  r.add("calibrate", "activation statistics of the final model",
        plain([](const Options&) { return make_calibrate(false); }));
  r.add("quantizeRtn", "integer weights, activation and KV-cache scales",
        plain([](const Options&) { return make_quantize_rtn(); }));
}

const PassRegistry& quant_passes() {
  static const PassRegistry* registry = [] {
    auto* r = new PassRegistry();
    register_quant_passes(*r);
    return r;
  }();
  return *registry;
}

StatusOr<std::vector<pass::PipelineEntry>> quant_pipeline(const Options& o) {
  if (et(o).spin_r1().apply() && !et(o).norm_conv().apply()) {
    return invalid_argument(
        "equivalentTransformation.spinR1 needs normConv: the residual-stream rotation is "
        "only function-preserving once RMSNorm gains are folded into the linears");
  }
  std::vector<pass::PipelineEntry> entries;
  for (const Stage& s : kPipeline) {
    if (s.enabled(o)) entries.push_back({s.pass, s.key, s.why});
  }
  return entries;
}

namespace {

/// "a, b, c".
std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

/// The pass names of `entries`, joined.
std::string pipeline_listing(const std::vector<pass::PipelineEntry>& entries) {
  std::vector<std::string> names;
  for (const pass::PipelineEntry& e : entries) names.push_back(e.pass);
  return joined(names);
}

}  // namespace

bool is_fixed_stage(const std::string& pass) {
  return pass == "calibrate" || pass == "quantizeRtn" || pass == "phaseImages";
}

Status check_disabled(const std::vector<pass::PipelineEntry>& entries,
                      const std::vector<std::string>& disabled) {
  for (const std::string& name : disabled) {
    if (!quant_passes().contains(name)) {
      return invalid_argument("--disable-pass ", name,
                              ": no such pass (quant passes: ", joined(quant_passes().names()),
                              ")");
    }
    if (is_fixed_stage(name)) {
      return invalid_argument("--disable-pass ", name,
                              ": a fixed stage of the quant pipeline cannot be disabled");
    }
    if (!pass::contains_pass(entries, name)) {
      log("quant").warn(
          "--disable-pass {}: the pass is not in this pipeline (its key is off); pipeline: {}",
          name, pipeline_listing(entries));
    }
  }
  return ok_status();
}

Status check_instrumentation(const std::vector<pass::PipelineEntry>& entries,
                             const pass::Instrumentation& instr) {
  QBC_RETURN_IF_ERROR(check_disabled(entries, instr.disabled));
  for (const std::string& name : instr.dump_after) {
    if (name == "all" || pass::contains_pass(entries, name)) continue;
    return invalid_argument("--dump-after ", name, ": not a pass of this pipeline (",
                            pipeline_listing(entries), ", or all)");
  }
  return ok_status();
}

StatusOr<pass::PassManager<PassContext>> build_pipeline(
    const std::vector<pass::PipelineEntry>& entries, const Options& options,
    pass::Instrumentation instr) {
  QBC_RETURN_IF_ERROR(check_instrumentation(entries, instr));
  pass::PassManager<PassContext> pm(std::move(instr));
  for (const pass::PipelineEntry& e : entries) {
    QBC_ASSIGN_OR_RETURN(std::unique_ptr<Pass> p, quant_passes().create(e.pass, options));
    pm.add(std::move(p));
  }
  return pm;
}

}  // namespace qbc::quant
