// The backend's registry and pipelines (see qbc/npu/compile.h and docs/npu.md
// "Passes"): each pass lives in its own file (passes.h); a pipeline is a table
// of {pass, key, why} rows, as the quant pipeline (src/quant/pipeline.cpp). The
// context the passes share is backend.h's.
#include "qbc/npu/compile.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "backend.h"
#include "passes.h"
#include "qbc/isa/text.h"
#include "qbc/isa/verify.h"
#include "qbc/pass/pass_manager.h"
#include "qbc/pass/pass_registry.h"

namespace qbc::npu {

int32_t Context::pass_id(const std::string& name) {
  for (size_t i = 0; i < b.passes.size(); ++i) {
    if (b.passes[i] == name) return static_cast<int32_t>(i);
  }
  b.passes.push_back(name);
  return static_cast<int32_t>(b.passes.size() - 1);
}

std::string Context::describe(pass::ResourceSet r) {
  std::string out;
  const std::pair<pass::ResourceSet, const char*> names[] = {{kTiles, "tile plan"},
                                                             {kMemory, "memory plan"},
                                                             {kImage, "weight image"},
                                                             {kPrograms, "programs"},
                                                             {kTokens, "dependency tokens"}};
  for (const auto& [bit, name] : names) {
    if ((r & bit) != 0) out += (out.empty() ? "" : ", ") + std::string(name);
  }
  return out;
}

Status Context::verify() const {
  if ((have & kTiles) != 0) QBC_RETURN_IF_ERROR(verify_plan(plan));
  if ((have & kTokens) == 0 || !verify_programs) return ok_status();
  return isa::verify(b);
}

StatusOr<std::string> Context::dump_text() const {
  if ((have & kPrograms) != 0) return isa::print_bundle(b);
  return plan_text(*this);
}

namespace {

using Registry = pass::PassRegistry<Context, Options>;

/// One row of a pipeline table.
struct Row {
  const char* pass;
  const char* key;
  const char* why;
};

// clang-format off
const Row kPlanTiles{"plan-tiles", "always",
    "first: every later decision is per tile; tiles follow target.sramBytesPerCore and llm.attributes.maxCoreDataLength, never the cache length"};
const Row kPlanMemory{"plan-memory", "always",
    "places the tiled weights, then per slot (runtime.batchSize) the KV caches (llm.attributes.maxCacheLength), io, activations, scratch"};
const Row kCheckFit{"check-fit", "always",
    "refuses a plan larger than target.dramBytes (exit 4) before any weight is read or program lowered"};
const Row kFillWeights{"fill-weights", "always",
    "writes the image in the layout plan-memory chose (shapes only when no weights are given)"};
const Row kLower{"lower", "inferenceScheme",
    "per scheme a prefill and a decode program for every cooperating core, without tokens"};
const Row kAssignTokens{"assign-tokens", "always",
    "dependency tokens from the access sets of what lower emitted (V5, V6); the verifier runs from here on"};
const Row kCheckContext{"check-context", "always",
    "V9: a second compile at twice llm.attributes.maxCacheLength (shapes only) has the same SRAM and stream lengths"};
// clang-format on

/// A named pipeline: its rows and whether the program verifier runs after its
/// passes.
struct Named {
  const char* name;
  std::vector<Row> rows;
  bool verify;
};

const std::vector<Named>& pipelines() {
  static const std::vector<Named> table = {
      // qbc plan's memory table: shapes only, nothing checked.
      {"npu-plan", {kPlanTiles, kPlanMemory, kFillWeights}, false},
      // qbc compile's check before calibration: the memory plan and its fit,
      // nothing more.
      {"npu-fit", {kPlanTiles, kPlanMemory, kCheckFit}, false},
      // qbc plan's per-scheme predictions and the context probe: programs,
      // unverified.
      {"npu-programs", {kPlanTiles, kPlanMemory, kFillWeights, kLower, kAssignTokens}, false},
      // qbc compile, run --backend npu, inspect --program.
      {"npu-compile",
       {kPlanTiles, kPlanMemory, kCheckFit, kFillWeights, kLower, kAssignTokens, kCheckContext},
       true},
  };
  return table;
}

/// The passes --disable-pass may remove: the checks (the others build the
/// bundle).
bool may_disable(const std::string& pass) { return pass == "check-fit" || pass == "check-context"; }

void register_npu_passes(Registry& r) {
  const auto plain = [](PassPtr (*make)()) {
    return [make](const Options&) -> StatusOr<PassPtr> { return make(); };
  };
  r.add("plan-tiles", "check the graph, write the bundle header, choose every node's tiles",
        plain(make_plan_tiles));
  r.add("plan-memory", "place the weights and the per-slot DRAM buffers", plain(make_plan_memory));
  r.add("check-fit", "refuse a plan that does not fit the device's DRAM", plain(make_check_fit));
  r.add("fill-weights", "the weight image and the host embedding", plain(make_fill_weights));
  r.add("lower", "per-core instruction streams of every scheme and phase", plain(make_lower));
  r.add("assign-tokens", "dependency tokens from the access sets", plain(make_assign_tokens));
  r.add("check-context", "V9: SRAM and programs independent of the cache length",
        plain(make_check_context));
}

const Registry& npu_passes() {
  static const Registry* registry = [] {
    auto* r = new Registry();
    register_npu_passes(*r);
    return r;
  }();
  return *registry;
}

StatusOr<const Named*> find_pipeline(const std::string& name) {
  for (const Named& p : pipelines()) {
    if (name == p.name) return &p;
  }
  std::string names;
  for (const Named& p : pipelines()) names += (names.empty() ? "" : ", ") + std::string(p.name);
  return internal_error("no backend pipeline '", name, "' (", names, ")");
}

std::vector<pass::PipelineEntry> entries_of(const Named& p) {
  std::vector<pass::PipelineEntry> out;
  for (const Row& r : p.rows) out.push_back({r.pass, r.key, r.why});
  return out;
}

/// check-context's second compile: npu-programs, shapes only, outside the pass
/// manager (no progress events, no dumps), with the attention nodes still
/// checked against the cache the graph was quantized for.
StatusOr<Compiled> probe(const ir::Graph& graph, const Options& options, int64_t cache_quantized) {
  QBC_ASSIGN_OR_RETURN(const Named* p, find_pipeline("npu-programs"));
  Context cx(graph, options, nullptr, ir::WeightViews{}, p->verify, cache_quantized);
  for (const Row& r : p->rows) {
    QBC_ASSIGN_OR_RETURN(PassPtr pass, npu_passes().create(r.pass, options));
    QBC_RETURN_IF_ERROR(pass->run(cx).status().with_context("probe pass ", r.pass));
  }
  return Compiled{std::move(cx.b), std::move(cx.plan)};
}

/// Runs pipeline `p` on a fresh context for `graph`.
StatusOr<isa::Bundle> run(const Named& p, const ir::Graph& graph, const Options& options,
                          const ir::WeightReader* weights, const ir::WeightViews& views,
                          const pass::Instrumentation& instr, int64_t cache_quantized,
                          std::vector<pass::PassRecord>* records, Plan* plan) {
  QBC_RETURN_IF_ERROR(check_instrumentation(p.name, instr));
  Context cx(graph, options, weights, views, p.verify, cache_quantized);
  cx.probe = [&graph, cache_quantized](const Options& o) {
    return probe(graph, o, cache_quantized);
  };
  pass::PassManager<Context> pm(instr);
  for (const Row& r : p.rows) {
    QBC_ASSIGN_OR_RETURN(PassPtr pass, npu_passes().create(r.pass, options));
    pm.add(std::move(pass));
  }
  QBC_RETURN_IF_ERROR(pm.run(cx, records));
  if (plan != nullptr) *plan = std::move(cx.plan);
  return std::move(cx.b);
}

}  // namespace

std::vector<std::string> pass_names() { return npu_passes().names(); }

std::vector<std::string> pipeline_names() {
  std::vector<std::string> out;
  for (const Named& p : pipelines()) out.push_back(p.name);
  return out;
}

StatusOr<std::vector<pass::PipelineEntry>> pipeline(const std::string& name) {
  QBC_ASSIGN_OR_RETURN(const Named* p, find_pipeline(name));
  return entries_of(*p);
}

bool is_pass(const std::string& name) { return npu_passes().contains(name); }

Status check_instrumentation(const std::string& pipeline_name, const pass::Instrumentation& instr) {
  QBC_ASSIGN_OR_RETURN(const Named* p, find_pipeline(pipeline_name));
  const std::vector<pass::PipelineEntry> entries = entries_of(*p);
  for (const std::string& name : instr.disabled) {
    if (!npu_passes().contains(name)) continue;  // another stage's pass
    if (!may_disable(name)) {
      return invalid_argument("--disable-pass ", name,
                              ": the backend pass builds the bundle and cannot be disabled (only "
                              "check-fit and check-context can)");
    }
  }
  for (const std::string& name : instr.dump_after) {
    if (name == "all" || !npu_passes().contains(name) || pass::contains_pass(entries, name))
      continue;
    return invalid_argument("--dump-after ", name, ": not a pass of the backend pipeline ",
                            pipeline_name);
  }
  return ok_status();
}

StatusOr<isa::Bundle> run_pipeline(const std::string& name, const ir::Graph& graph,
                                   const Options& options, const ir::WeightReader* weights,
                                   const ir::WeightViews& views, const pass::Instrumentation& instr,
                                   std::vector<pass::PassRecord>* records, Plan* plan) {
  QBC_ASSIGN_OR_RETURN(const Named* p, find_pipeline(name));
  return run(*p, graph, options, weights, views, instr, options.max_cache, records, plan);
}

StatusOr<isa::Bundle> compile(const ir::Graph& graph, const ir::WeightReader& weights,
                              const Options& options, const ir::WeightViews& views,
                              const pass::Instrumentation& instr) {
  return run_pipeline("npu-compile", graph, options, &weights, views, instr);
}

std::string pass_summary(const std::string& name) { return npu_passes().summary(name); }

StatusOr<std::string> run_passes_text(const std::vector<std::string>& passes,
                                      const ir::Graph& graph, const Options& options,
                                      const ir::WeightReader* weights) {
  Context cx(graph, options, weights, ir::WeightViews{}, /*verify_programs=*/true,
             options.max_cache);
  cx.probe = [&graph, &options](const Options& o) { return probe(graph, o, options.max_cache); };
  pass::PassManager<Context> pm(pass::Instrumentation{});
  for (const std::string& name : passes) {
    if (!npu_passes().contains(name)) return unimplemented("unknown backend pass '", name, "'");
    QBC_ASSIGN_OR_RETURN(PassPtr pass, npu_passes().create(name, options));
    pm.add(std::move(pass));
  }
  QBC_RETURN_IF_ERROR(pm.run(cx, nullptr));
  return cx.dump_text();
}

}  // namespace qbc::npu
