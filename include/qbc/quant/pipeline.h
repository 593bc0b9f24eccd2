// The quant stage's pass registry and its pipeline as data: which passes exist, which
// configuration key puts each in the pipeline, and why each sits where it does
// (src/quant/pipeline.cpp). `qbc quantize --print-pipeline` prints it.
#pragma once

#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/pass/pass_registry.h"
#include "qbc/pass/pipeline.h"
#include "qbc/quant/pass.h"

namespace qbc::quant {

using PassRegistry = pass::PassRegistry<PassContext, config::CompileOptions>;

/// Registers every quant pass (one line each, in pipeline order).
void register_quant_passes(PassRegistry& registry);

/// The registry with every quant pass, built once.
const PassRegistry& quant_passes();

/// The passes `options` enables, in order, each with its enabling key and reason.
/// Refuses inconsistent settings (spinR1 without normConv) before any work.
StatusOr<std::vector<pass::PipelineEntry>> quant_pipeline(const config::CompileOptions& options);

/// True for the pipeline's fixed stages (calibrate, quantizeRtn, and phaseImages wherever
/// bit.prefill / bit.decode put it): --disable-pass refuses them (the output would be
/// meaningless without them: without phaseImages, the second image of a GPTQ model would be
/// rounded from GPTQ's own integers).
bool is_fixed_stage(const std::string& pass);

/// Checks --disable-pass names against `entries`: an unknown name or a fixed stage is
/// refused (kInvalidArgument, listing the pipeline's passes); a registered pass that
/// `options` leaves out of the pipeline is only warned about.
Status check_disabled(const std::vector<pass::PipelineEntry>& entries,
                      const std::vector<std::string>& disabled);

/// check_disabled, and the --dump-after names: `all` or passes of `entries` (else refused,
/// kInvalidArgument listing them), before any work.
Status check_instrumentation(const std::vector<pass::PipelineEntry>& entries,
                             const pass::Instrumentation& instr);

/// The passes of `entries` made from `options`, in order.
StatusOr<pass::PassManager<PassContext>> build_pipeline(
    const std::vector<pass::PipelineEntry>& entries, const config::CompileOptions& options,
    pass::Instrumentation instr);

}  // namespace qbc::quant
