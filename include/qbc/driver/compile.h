// `qbc compile` and `qbc quantize` as one pipeline of driver stages:
//
//   parse -> fit -> quantize -> backend -> write
//
// rows of {stage, what enables it, why it sits there} like the quant pipeline's passes
// (qbc/pass/pipeline.h). Each stage hands its result to the next in memory: the quantized
// graph goes to the backend as it left the quant pipeline (its integer weights spilled to
// the sidecar as they were made, and mapped back), and the quantized MBLT is written only
// when it is an output (`qbc quantize`, `compile --keep-intermediate`). `qbc plan` runs the
// first stages on a shape-only graph (shape_for_backend below, driver/plan.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/driver/bit_budget.h"
#include "qbc/driver/quantize.h"
#include "qbc/driver/vision_part.h"
#include "qbc/ir/graph.h"
#include "qbc/mxq/model_file.h"
#include "qbc/npu/compile.h"
#include "qbc/npu/memory_plan.h"
#include "qbc/pass/pipeline.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// What a `qbc compile` or `qbc quantize` run was asked for.
struct CompileRequest {
  bool compile = true;            ///< false: `qbc quantize` (parse, quantize, write the MBLT)
  std::string model;              ///< HF folder, .gguf, or an .mblt from `qbc parse`
  std::string output;             ///< compile: OUT.mxq; quantize: OUT.mblt
  std::string keep_intermediate;  ///< compile: DIR of the quantized MBLT ("": not written)
  /// Checkpoint finished calibration blocks in OUT.qbc-resume/ and resume from those an
  /// earlier, killed run on the same inputs left (driver/resume.h); --no-resume: false.
  bool resume = true;
  /// A VLM folder's vision calibration images (--images DIR: its PNG and JPEG files); empty:
  /// synthetic images, said in the summary.
  std::string images;
  /// Producer, threads, and the instrumentation as the user gave it (every stage's pass
  /// names: the quant pipeline gets its own, the backend its own).
  QuantizeRun run;
  /// compile --target-size / --target-decode-tok-s: the bits stage chooses each block
  /// linear's weight bits before the fit check (driver/bit_budget.h).
  BitBudgetRequest budget;
};

/// The stages `r` runs, in order, as pipeline rows (pass = the stage's name).
std::vector<pass::PipelineEntry> compile_stages(const CompileRequest& r);

/// One step's wall time, for the summary and the report: stage "quant" (each quant pass),
/// "backend" ("compile") or "mxq" ("write").
struct TimedStep {
  std::string stage, name;
  double seconds = 0;
};

/// What a run did.
struct CompileResult {
  QuantizeSummary quant;
  bool mblt_kept = false;  ///< the quantized MBLT was written (quantize, --keep-intermediate)
  std::vector<pass::PassRecord> stages;  ///< every stage that ran, with its wall time
  // compile only:
  std::vector<mxq::WrittenFile> files;  ///< the MXQ files written, the loadable one last
  std::string target;
  npu::MemoryReport memory;
  double backend_seconds = 0, write_seconds = 0;
  /// A VLM folder's vision part: compiled into the MXQ, or why not.
  VisionOutcome vision;
  /// What bits by budget chose (CompileRequest::budget).
  std::optional<BitBudgetChoice> budget;
  /// The configuration the later stages ran with when a stage changed the caller's (bits by
  /// budget), origins included; unset otherwise.
  std::optional<config::ResolvedConfig> effective;

  std::vector<TimedStep> steps() const;
};

/// The checks of `r` that need neither the configuration nor the model: a model and an
/// output are given, and compile's output is not an .mblt (kInvalidArgument, exit 2).
Status check_request(const CompileRequest& r);

/// Runs the stages of `r` for `cfg` (resolved for the model). Every input and flag is
/// checked before the model is parsed; the fit check (compile) runs before any calibration
/// (kResourceExhausted, exit 4). Nothing partial is left on failure or cancellation.
StatusOr<CompileResult> run_compile(const CompileRequest& r, const config::ResolvedConfig& cfg);

/// The summary line and the JSON summary of a run (docs/cli.md).
std::string summary_text(const CompileRequest& r, const CompileResult& res);
std::string summary_json(const CompileRequest& r, const CompileResult& res);

/// --print-pipeline: the quant passes `cfg` enables, then for compile the backend's
/// (npu-compile), as text tables and as JSON ({"pipeline", "backend", "stages"}).
/// --disable-pass / --dump-after names are checked against both.
struct PipelineListing {
  std::string text, json;
};
StatusOr<PipelineListing> list_pipeline(const CompileRequest& r, const config::ResolvedConfig& cfg);

/// The fit stage's input, shared with `qbc plan`: the shape-only quantized graph of the
/// float graph `g` (quant::shape_only) and the backend options of `cfg` for it.
struct ShapeForBackend {
  ir::Graph graph;
  npu::Options options;
};
StatusOr<ShapeForBackend> shape_for_backend(const ir::Graph& g, const config::ResolvedConfig& cfg);

}  // namespace qbc::driver
