// The ARIES backend: lowers a quantized MBLT graph to an isa::Bundle
// (docs/npu.md): the DRAM image of pre-tiled weights, the memory plan, and per
// inference scheme a prefill and a decode program for every cooperating core.
// Tile sizes follow the target's SRAM budget and never the context length; the
// context only changes DRAM sizes and loop trip counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qbc/ir/graph.h"
#include "qbc/ir/weight_reader.h"
#include "qbc/isa/program.h"
#include "qbc/pass/pass_manager.h"
#include "qbc/pass/pipeline.h"
#include "qbc/support/status.h"

namespace qbc::npu {

struct Plan;  // qbc/npu/plan.h

/// The numbers of the target profile the backend uses (configs/targets/*.yaml).
struct Target {
  std::string name;
  int32_t clusters = 1, cores_per_cluster = 1;
  int64_t sram_bytes = 0, dram_bytes = 0;
  int64_t dma_align = 16;    ///< DMA address and stride alignment on the DRAM side
  int64_t dram_reserve = 0;  ///< DRAM kept free for the runtime and firmware
  int32_t cores() const { return clusters * cores_per_cluster; }
};

/// A mode to compile: a scheme name and the cores cooperating on one sequence.
struct ModeRequest {
  isa::Scheme scheme = isa::Scheme::kSingle;
  int32_t cores = 1;      ///< cooperating cores per instance
  int32_t instances = 1;  ///< independent sequences the mode serves at once
};

/// What to compile for. Which passes run is the pipeline's choice (below), not
/// an option.
struct Options {
  Target target;
  std::vector<ModeRequest> modes;  ///< at least one
  int64_t max_cache = 4096;        ///< KV capacity per sequence (llm.attributes.maxCacheLength)
  int64_t chunk = 128;             ///< prefill tokens per call (llm.attributes.maxCoreDataLength)
  int64_t batch = 1;               ///< sequences with their own KV region (runtime.batchSize)
  /// Also a span program per mode (isa::Phase::kSpan): calls that are one bidirectional span
  /// (a Gemma 3 VLM's images). Decoders only.
  bool span_programs = false;
};

/// The backend's passes, by registry name (docs/npu.md "Passes"): plan-tiles,
/// plan-memory, check-fit, fill-weights, lower, assign-tokens, check-context.
std::vector<std::string> pass_names();
/// True for a name of pass_names().
bool is_pass(const std::string& name);

/// The named pipelines (docs/npu.md "Pipelines"), each a list of {pass, key,
/// why} rows:
///   npu-plan      plan-tiles, plan-memory, fill-weights: qbc plan's memory
///   table npu-fit       plan-tiles, plan-memory, check-fit: qbc compile's
///   check before calibration npu-programs  npu-plan + lower, assign-tokens,
///   unverified: qbc plan's predictions npu-compile   every pass, the program
///   verifier after each once the programs have
///                 their tokens: qbc compile, run --backend npu, inspect
///                 --program
std::vector<std::string> pipeline_names();
/// The rows of pipeline `name` (kInternal for an unknown name: a bug of the
/// caller).
StatusOr<std::vector<pass::PipelineEntry>> pipeline(const std::string& name);

/// Checks --disable-pass and --dump-after for the backend part of a run of
/// pipeline `name`: names that are not backend passes belong to another stage
/// and are ignored; a backend pass other than check-fit and check-context
/// cannot be disabled, and --dump-after names a pass of the pipeline (or
/// `all`). kInvalidArgument otherwise.
Status check_instrumentation(const std::string& name, const pass::Instrumentation& instr);

/// Runs pipeline `name` on `graph` (quantized: every linear a qlinear, every
/// attention with a quantized KV cache). `weights` null: shapes only (no weight
/// is read, the image stays empty). `codes`, when given, serves the int8-stored
/// weight codes without a float round trip (the bundle is the same either way).
/// Errors name the node at fault; kResourceExhausted when a tile cannot fit
/// SRAM or (check-fit) the plan the device. `records`, when given, receives
/// each pass's run (its name, whether it changed anything, its time); `plan`, when given,
/// the plan the passes made (qbc/npu/plan.h).
StatusOr<isa::Bundle> run_pipeline(const std::string& name, const ir::Graph& graph,
                                   const Options& options, const ir::WeightReader* weights,
                                   const ir::WeightViews& views = {},
                                   const pass::Instrumentation& instr = {},
                                   std::vector<pass::PassRecord>* records = nullptr,
                                   Plan* plan = nullptr);

/// run_pipeline("npu-compile", ...) with weights.
StatusOr<isa::Bundle> compile(const ir::Graph& graph, const ir::WeightReader& weights,
                              const Options& options, const ir::WeightViews& views = {},
                              const pass::Instrumentation& instr = {});

/// The one-line summary of backend pass `name` ("" for an unknown name).
std::string pass_summary(const std::string& name);

/// Runs the backend passes `passes` in the order given on `graph` (qbc opt; each pass's
/// needs are checked, so a list missing a pass another one needs is refused, kInvalidArgument,
/// naming both), the program verifier after each pass once the programs have their tokens.
/// Returns the text of what the last pass produced: the program text (isa::print_bundle) once
/// there are programs, else the plan text. An unknown name is kUnimplemented.
StatusOr<std::string> run_passes_text(const std::vector<std::string>& passes,
                                      const ir::Graph& graph, const Options& options,
                                      const ir::WeightReader* weights);

}  // namespace qbc::npu
