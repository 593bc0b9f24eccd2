// qbc compile / qbc quantize as a pipeline of driver stages (see qbc/driver/compile.h).
#include "qbc/driver/compile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "qbc/driver/backend.h"
#include "qbc/driver/model_loader.h"
#include "qbc/driver/mxq_output.h"
#include "qbc/driver/resume.h"
#include "qbc/ir/serialize.h"
#include "qbc/quant/pipeline.h"
#include "qbc/quant/shape_only.h"
#include "qbc/support/logging.h"
#include "qbc/support/progress.h"

namespace qbc::driver {
namespace {

namespace fs = std::filesystem;

/// What the stages hand each other.
struct Job {
  Job(const CompileRequest& r, const config::ResolvedConfig& c, CompileResult& o)
      : req(r), cfg(c), out(o) {}
  const CompileRequest& req;
  /// The effective configuration: the caller's, with the bits stage's choice.
  config::ResolvedConfig cfg;
  CompileResult& out;
  std::string sidecar;  ///< where the quantize stage spills the integer weights
  std::string mblt;     ///< the quantized MBLT to write ("": none)
  LoadedModel model;    ///< parse: the float model
  std::optional<QuantizedModel> quantized;
  isa::Bundle bundle;                               ///< backend
  std::optional<VisionBuild> vision;                ///< a VLM folder's vision part
  std::vector<std::string> images;                  ///< --images DIR's files
  std::optional<quant::CheckpointDir> checkpoints;  ///< --no-resume: none
};

/// The user's instrumentation without the backend's pass names (the backend gets those):
/// what the quant pipeline is checked and run with.
pass::Instrumentation quant_part(const CompileRequest& r) {
  pass::Instrumentation q = r.run.instrumentation;
  if (!r.compile) return q;
  const auto drop = [](std::vector<std::string>& v) {
    v.erase(
        std::remove_if(v.begin(), v.end(), [](const std::string& n) { return npu::is_pass(n); }),
        v.end());
  };
  drop(q.disabled);
  drop(q.dump_after);
  return q;
}

// A vision tower's MBLT alone: the compile's quant stage runs the decoder pipeline
// (quant::quantize_vision, which the VLM folder's compile runs, is the vision one;
// docs/multimodal.md): exit 3 naming the first tower op, before the graph's source model is
// opened.
Status refuse_vision_ops(const std::string& path) {
  if (!is_mblt_path(path)) return ok_status();
  QBC_ASSIGN_OR_RETURN(const ir::Graph g, ir::load(path));
  // A decoder's rope_table (M-RoPE over the host's tables) is lowered; a tower's is not.
  const bool decoder = std::any_of(g.nodes().begin(), g.nodes().end(), [](const ir::Node& n) {
    return n.op == ir::Op::kInput && n.type.dtype == ir::DType::kI64;
  });
  for (const ir::Node& n : g.nodes()) {
    if (n.op == ir::Op::kGelu || (n.op == ir::Op::kRopeTable && !decoder) ||
        n.op == ir::Op::kFullAttention || n.op == ir::Op::kMergeRows || n.op == ir::Op::kAvgPool) {
      return unimplemented(path, ": ", ir::describe(n), ": op '", ir::op_info(n.op).name,
                           "' is a vision tower's; a tower's MBLT does not compile alone (the "
                           "decoder pipeline would quantize it): compile the VLM folder, whose "
                           "vision part is calibrated on images (docs/multimodal.md)");
    }
  }
  return ok_status();
}

Status parse_stage(Job& j) {
  QBC_RETURN_IF_ERROR(refuse_vision_ops(j.req.model));
  if (!j.req.images.empty()) {  // said before any work: a bad folder, a text model
    QBC_ASSIGN_OR_RETURN(j.images, list_images(j.req.images));
    QBC_ASSIGN_OR_RETURN(const bool vlm, has_vision_part(j.req.model));
    if (!vlm)
      return invalid_argument("--images ", j.req.images, ": ", j.req.model,
                              " has no vision part (no vision_config in its config.json)");
  }
  // A vision.imageSize the tower cannot take is said before any work, not after the language
  // model as a part left out.
  if (j.req.compile)
    QBC_RETURN_IF_ERROR(check_vision_image_size(j.req.model, j.cfg.options.vision().image_size()));
  QBC_ASSIGN_OR_RETURN(j.model, open_model(j.req.model, j.cfg));
  // The split is checked against the model's blocks before any work.
  if (j.req.compile) {
    QBC_RETURN_IF_ERROR(split_boundaries(j.cfg, j.model.graph).status());
  }
  return ok_status();
}

/// Bits by budget: which block linears keep 8-bit weights (driver/bit_budget.h); every later
/// stage, and the MXQ's stored configuration, see the choice.
Status bits_stage(Job& j) {
  QBC_ASSIGN_OR_RETURN(BitBudgetChoice c,
                       choose_bits(j.model, &j.cfg, j.req.budget, j.req.run.threads));
  j.out.budget = std::move(c);
  j.out.effective = j.cfg;
  return ok_status();
}

Status fit_stage(Job& j) {
  QBC_ASSIGN_OR_RETURN(ShapeForBackend s, shape_for_backend(j.model.graph, j.cfg));
  QBC_RETURN_IF_ERROR(npu::check_instrumentation("npu-compile", j.req.run.instrumentation));
  pass::Instrumentation fit;
  fit.disabled = j.req.run.instrumentation.disabled;  // --disable-pass check-fit skips it
  return npu::run_pipeline("npu-fit", s.graph, s.options, nullptr, {}, fit).status();
}

Status quantize_stage(Job& j) {
  QuantizeRun run = j.req.run;
  run.instrumentation = quant_part(j.req);
  if (j.req.resume) {
    std::string inputs;
    QBC_ASSIGN_OR_RETURN(const std::string fp,
                         resume_fingerprint(j.req.model, j.model, j.cfg, run.producer, &inputs));
    QBC_ASSIGN_OR_RETURN(j.checkpoints,
                         quant::CheckpointDir::open(resume_dir(j.req.output), fp, inputs));
    run.checkpoints = &*j.checkpoints;
  }
  QBC_ASSIGN_OR_RETURN(QuantizedModel q, quantize(j.model, j.cfg, j.sidecar, run));
  j.quantized = std::move(q);
  j.model = LoadedModel();  // the float graph is done with (the source stays open in `q`)
  return ok_status();
}

Status backend_stage(Job& j) {
  const LoadedModel& q = j.quantized->model;
  QBC_ASSIGN_OR_RETURN(npu::Options o, backend_options(q.graph, j.cfg));
  // The bundle views the source's bf16 embedding: j.quantized stays open until the write.
  QBC_ASSIGN_OR_RETURN(j.bundle, compile_backend_in_place(q, o, j.req.run.instrumentation));
  j.out.target = j.bundle.target;
  j.out.memory = npu::memory_report(j.bundle);
  return ok_status();
}

/// A VLM folder's vision part, for the target and schemes of the language programs. A tower
/// the backend does not lower yet leaves the MXQ a language model only: said as a warning and
/// in the summary, not an error (the language part is still what `qbc run` serves).
Status vision_stage(Job& j) {
  const auto t0 = std::chrono::steady_clock::now();
  QBC_ASSIGN_OR_RETURN(npu::Options o, backend_options(j.quantized->model.graph, j.cfg));
  // The language model's basis: spinR1's rotation, which the features must be written in.
  QBC_ASSIGN_OR_RETURN(const quant::OutputBasis basis,
                       quant::output_basis(j.quantized->model.graph));
  StatusOr<std::optional<VisionBuild>> v =
      build_vision_part(j.req.model, j.cfg, o, j.images, 4, &basis);
  VisionOutcome& out = j.out.vision;
  if (!v.ok() && v.status().code() == Code::kUnimplemented) {
    out.present = true;
    out.reason = v.status().message();
    log("vision").warn("{}; the MXQ holds the language model only", out.reason);
    return ok_status();
  }
  if (!v.ok()) return v.status();
  if (!v->has_value()) return ok_status();
  const mxq::pb::VisionPart& vp = (*v)->part;
  // Idefics3's span text is encoded when the MXQ is written: each special token of it (one '<')
  // and each newline is at most one token, a bound on the span here.
  const std::string& span = (*v)->span_text;
  const int64_t tokens =
      span.empty() ? vp.tokens_per_image() + vp.image_prefix_ids_size() + vp.image_suffix_ids_size()
                   : static_cast<int64_t>(std::count(span.begin(), span.end(), '<') +
                                          std::count(span.begin(), span.end(), '\n'));
  if (j.bundle.max_cache <= tokens)
    return invalid_argument(j.req.model, ": the context (llm.attributes.maxCacheLength ",
                            j.bundle.max_cache, ") holds no prompt with an image, which is ",
                            tokens, " tokens alone; raise it (e.g. --context ",
                            std::max<int64_t>(2048, tokens * 2), ")");
  const int64_t levels = vp.deepstack_levels();
  if (static_cast<size_t>(levels) != j.bundle.deepstack.size())
    return unimplemented(j.req.model, "/config.json: vision_config.deepstack_visual_indexes has ",
                         levels, " taps, but the language model has ", j.bundle.deepstack.size(),
                         " DeepStack inputs (one per decoder layer, num_hidden_layers ",
                         "limits them); HF drops the taps past the last layer, qbc does not");
  if ((*v)->bundle.vocab != j.bundle.hidden * (1 + levels))
    return invalid_argument(
        j.req.model, "/config.json: the vision part writes features of ", (*v)->bundle.vocab,
        " columns (the projector's output width",
        levels > 0 ? ", with " + std::to_string(levels) + " DeepStack levels" : std::string(),
        "), the language model's hidden size is ", j.bundle.hidden);
  j.vision = std::move(**v);
  out.present = out.compiled = true;
  out.rows = j.vision->bundle.output_rows;
  out.views = mxq::vision_views(j.vision->part);
  out.width = j.bundle.hidden;
  out.deepstack_levels = levels;
  out.dram_bytes = j.vision->bundle.dram.total();
  out.calibration_images = j.vision->calibration_images;
  out.synthetic_calibration = j.vision->synthetic_calibration;
  out.block_errors = j.vision->block_errors;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return ok_status();
}

Status write_stage(Job& j) {
  if (!j.mblt.empty()) {
    if (Status s = save_quantized(*j.quantized, j.mblt); !s.ok()) {
      if (!j.req.compile) {  // qbc quantize leaves no sidecar without its graph
        j.quantized->model.sidecar.reset();
        std::error_code ec;
        fs::remove(j.sidecar, ec);
      }
      return s;
    }
    j.out.mblt_kept = true;
  }
  j.out.quant = j.quantized->summary;
  if (!j.req.compile) return ok_status();
  // The writer's time is mostly the disk's.
  const auto t0 = std::chrono::steady_clock::now();
  QBC_ASSIGN_OR_RETURN(j.out.files, write_mxq(j.quantized->model, j.bundle, j.cfg, j.req.output,
                                              j.vision ? &*j.vision : nullptr));
  j.out.write_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return ok_status();
}

bool always(const CompileRequest&) { return true; }
bool compiling(const CompileRequest& r) { return r.compile; }
bool budgeted(const CompileRequest& r) {
  return r.compile && r.budget.kind != BitBudgetRequest::Kind::kNone;
}
bool compiling_vlm(const CompileRequest& r) {
  if (!r.compile) return false;
  const StatusOr<bool> vlm = has_vision_part(r.model);
  return vlm.ok() && *vlm;
}

struct Stage {
  const char* name;
  const char* enabled_by;
  bool (*enabled)(const CompileRequest&);
  Status (*run)(Job&);
  const char* why;
};

// clang-format off
const Stage kStages[] = {
    {"parse", "always", always, parse_stage,
     "opens the model (an .mblt re-opens the source it names) and builds the float graph; compile checks the split against its blocks"},
    {"bits", "compile --target-size / --target-decode-tok-s", budgeted, bits_stage,
     "bits by budget: each block linear's sensitivity on the calibration data, then the plans of the cost model choose which keep 8 bits; the effective configuration holds the choice"},
    {"fit", "qbc compile", compiling, fit_stage,
     "npu-fit on the shape-only quantized graph: a model that does not fit the target stops here (exit 4), before any quantization (and, without a budget, any calibration)"},
    {"quantize", "always", always, quantize_stage,
     "the quant pipeline (--print-pipeline); integer weights spilled to the sidecar as made, the graph kept in memory"},
    {"backend", "qbc compile", compiling, backend_stage,
     "npu-compile on the quantized graph as the quantize stage left it in memory: programs, weight image, memory plan"},
    {"vision", "qbc compile of a VLM folder", compiling_vlm, vision_stage,
     "a VLM folder's vision tower: calibrated on --images (or synthetic images), quantized with the vision recipe, lowered for the same target and schemes"},
    {"write", "always", always, write_stage,
     "the outputs: the quantized MBLT (quantize, --keep-intermediate), then the MXQ (compile)"},
};
// clang-format on

/// Where the outputs go: the sidecar and the MBLT (quantize: the output; compile: in
/// --keep-intermediate DIR, or the sidecar alone in a temporary folder beside the output,
/// `*temp_dir`, which the caller removes).
Status place_outputs(Job& j, std::string* temp_dir) {
  const CompileRequest& r = j.req;
  if (!r.compile) {
    j.mblt = r.output;
    j.sidecar = sidecar_path(r.output);
    return ok_status();
  }
  const fs::path out(r.output);
  const fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return not_found(r.output, ": output folder ", dir.string(), " does not exist");
  fs::path keep;
  if (!r.keep_intermediate.empty()) {
    keep = r.keep_intermediate;
    fs::create_directories(keep, ec);
    if (ec) return invalid_argument("--keep-intermediate ", keep.string(), ": ", ec.message());
  } else if (r.resume) {
    // In the checkpoint folder, so that a killed run leaves one folder, which the next run
    // reuses; its scratch files are not resumed from (a killed run's are removed).
    keep = fs::path(resume_dir(r.output)) / "work";
    fs::remove_all(keep, ec);
    fs::create_directories(keep, ec);
    if (ec)
      return invalid_argument(r.output, ": cannot create ", keep.string(), ": ", ec.message());
  } else {
    std::string templ = (dir / ".qbc-compile-XXXXXX").string();
    if (mkdtemp(templ.data()) == nullptr)
      return invalid_argument(r.output, ": cannot create a temporary folder in ", dir.string());
    keep = templ;
    *temp_dir = templ;
  }
  const std::string mblt = (keep / (out.stem().string() + ".mblt")).string();
  j.sidecar = sidecar_path(mblt);
  if (!r.keep_intermediate.empty()) j.mblt = mblt;
  return ok_status();
}

bool ends_with(const std::string& s, const char* suffix) {
  const std::string t(suffix);
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

/// --no-resume: the checkpoints of an earlier run for `output` are not used, nor kept.
void remove_checkpoints(const std::string& output) {
  const std::string dir = resume_dir(output);
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  fs::remove_all(dir, ec);
  log("resume").warn("--no-resume: removed the checkpoints in {}", dir);
}

/// ", lowest tower block SQNR 38.1 dB (vis.blk.11.ffn_residual) of 12": the block the most
/// error comes from ("" without a comparison).
std::string lowest_block_text(const std::vector<TowerBlockError>& errors) {
  if (errors.empty()) return "";
  const auto low = std::min_element(
      errors.begin(), errors.end(),
      [](const TowerBlockError& a, const TowerBlockError& b) { return a.sqnr_db < b.sqnr_db; });
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(1);
  os << ", lowest tower block SQNR " << low->sqnr_db << " dB (" << low->node << ") of "
     << errors.size();
  return os.str();
}

/// The vision part's clause of the summary ("" for a text model).
std::string vision_text(const CompileResult& res) {
  const VisionOutcome& v = res.vision;
  if (!v.present) return "";
  if (!v.compiled) return "; vision part NOT compiled (" + v.reason + "): the MXQ takes no images";
  return "; vision part: " +
         (v.views > 1 ? std::to_string(v.views - 1) + " tiles and a global view of " : "") +
         std::to_string(v.rows) + " feature rows x " + std::to_string(v.width) +
         (v.deepstack_levels > 0
              ? " and " + std::to_string(v.deepstack_levels) + " DeepStack levels of them"
              : std::string()) +
         " per image, DRAM " + npu::human_bytes(v.dram_bytes) + ", calibrated on " +
         std::to_string(v.calibration_images) +
         (v.synthetic_calibration ? " synthetic images (pass --images DIR for real ones)"
                                  : " images") +
         lowest_block_text(v.block_errors) + ", in " + progress::format_duration(v.seconds);
}

/// "12.3 MiB": the one unit convention of plan, inspect and this summary.
std::string bytes_text(int64_t bytes) { return npu::human_bytes(bytes); }

}  // namespace

std::vector<pass::PipelineEntry> compile_stages(const CompileRequest& r) {
  std::vector<pass::PipelineEntry> rows;
  for (const Stage& s : kStages)
    if (s.enabled(r)) rows.push_back({s.name, s.enabled_by, s.why});
  return rows;
}

Status check_request(const CompileRequest& r) {
  const char* command = r.compile ? "compile" : "quantize";
  if (r.model.empty())
    return invalid_argument(command, ": the model (HF folder, .gguf or .mblt) is required");
  if (r.output.empty())
    return invalid_argument(command,
                            r.compile ? ": -o OUT.mxq is required" : ": -o OUT.mblt is required");
  if (r.compile && ends_with(r.output, ".mblt"))
    return invalid_argument("compile: -o ", r.output, ": compile writes MXQ (-o OUT.mxq); ",
                            "`qbc quantize` writes the quantized MBLT, and --keep-intermediate "
                            "DIR keeps compile's");
  if (!r.compile && !is_mblt_path(r.output))
    return invalid_argument("output ", r.output, " must end in .mblt");
  if (!r.compile && r.budget.kind != BitBudgetRequest::Kind::kNone)
    return invalid_argument("quantize: ", r.budget.flag,
                            " needs the target's cost model: use `qbc compile`");
  return ok_status();
}

StatusOr<CompileResult> run_compile(const CompileRequest& r, const config::ResolvedConfig& cfg) {
  QBC_RETURN_IF_ERROR(check_request(r));
  QBC_RETURN_IF_ERROR(check_calibration_inputs(cfg));
  if (!r.resume) remove_checkpoints(r.output);
  ResumeFolder resume(r.resume ? resume_dir(r.output) : "");  // after the job, like `cleanup`
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      if (!dir.empty()) fs::remove_all(dir, ec);
    }
  } cleanup;  // destroyed after the job, whose quantized model maps a file in it
  CompileResult out;
  Job job(r, cfg, out);
  QBC_RETURN_IF_ERROR(place_outputs(job, &cleanup.dir));
  for (const Stage& s : kStages) {
    if (!s.enabled(r)) continue;
    const auto t0 = std::chrono::steady_clock::now();
    QBC_RETURN_IF_ERROR(s.run(job));
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    out.stages.push_back({s.name, true, secs});
    if (std::string(s.name) == "backend") out.backend_seconds = secs;
    log("driver").info("stage {:<9} {:8.2f} s", s.name, secs);
  }
  resume.succeeded();
  return out;
}

std::vector<TimedStep> CompileResult::steps() const {
  std::vector<TimedStep> v;
  for (const pass::PassRecord& p : quant.passes) v.push_back({"quant", p.name, p.seconds});
  if (!files.empty()) {
    v.push_back({"backend", "compile", backend_seconds});
    v.push_back({"mxq", "write", write_seconds});
  }
  return v;
}

std::string summary_text(const CompileRequest& r, const CompileResult& res) {
  const QuantizeSummary& s = res.quant;
  char figures[256];
  std::snprintf(figures, sizeof(figures),
                "%d linears quantized (%d left in float), calibrated on %zu samples",
                s.quantized_linears, s.float_linears, s.samples);
  std::string text = r.compile && res.mblt_kept
                         ? "kept " + s.mblt + " (" + bytes_text(s.mblt_bytes) + ") and " +
                               s.sidecar + " (" + bytes_text(s.sidecar_bytes) + "); quantized in " +
                               progress::format_duration(s.seconds) + "; " + figures
                     : r.compile
                         ? "quantized in " + progress::format_duration(s.seconds) + "; " + figures
                         : "wrote " + s.mblt + " (" + bytes_text(s.mblt_bytes) + ") and " +
                               s.sidecar + " (" + bytes_text(s.sidecar_bytes) + ") in " +
                               progress::format_duration(s.seconds) + "; " + figures;
  if (!s.second_images.empty()) text += "; " + s.second_images;
  if (!s.imported_text.empty()) text += "; " + s.imported_text;
  if (r.compile) {
    int64_t total = 0;
    for (const mxq::WrittenFile& f : res.files) total += f.bytes;
    int64_t peak = 0;
    for (int64_t p : res.memory.sram_peak) peak = std::max(peak, p);
    char line[512];
    std::snprintf(line, sizeof(line),
                  "; backend for %s in %s: DRAM %s of %s, SRAM peak %s per core, program %s; "
                  "MXQ written in %s",
                  res.target.c_str(), progress::format_duration(res.backend_seconds).c_str(),
                  npu::human_bytes(res.memory.dram.total()).c_str(),
                  npu::human_bytes(res.memory.device_bytes).c_str(), npu::human_bytes(peak).c_str(),
                  npu::human_bytes(res.memory.program_bytes).c_str(),
                  progress::format_duration(res.write_seconds).c_str());
    text =
        "wrote " + r.output + " (" + bytes_text(total) +
        (res.files.size() > 1 ? ", manifest of " + std::to_string(res.files.size() - 1) + " parts"
                              : "") +
        "); " + text + line + vision_text(res);
  }
  if (res.budget)
    text += "; " + bit_budget_text(*res.budget) + "; compiled: DRAM weights " +
            npu::human_bytes(res.memory.dram.weights);
  // What happened per source type, e.g. "Q6_K: 3 tensors dequantized and re-quantized to W8".
  std::string types;
  for (const SourceTypeOutcome& t : s.source_types)
    types += (types.empty() ? "; source types: " : "; ") + describe(t);
  return text + types;
}

std::string summary_json(const CompileRequest& r, const CompileResult& res) {
  const QuantizeSummary& s = res.quant;
  nlohmann::json source_types = nlohmann::json::array();
  for (const SourceTypeOutcome& t : s.source_types) {
    nlohmann::json requantized = nlohmann::json::object();
    for (const auto& [bits, n] : t.quantized) requantized["W" + std::to_string(bits)] = n;
    source_types.push_back({{"dtype", t.dtype},
                            {"tensors", t.tensors},
                            {"quantized", requantized},
                            {"host_embedding", t.host_embedding},
                            {"float", t.float_kept},
                            {"dequantized", !t.lossless_source}});
  }
  nlohmann::json j;
  if (r.compile) {
    j["mxq"] = r.output;
    j["files"] = nlohmann::json::array();
    for (const mxq::WrittenFile& f : res.files)
      j["files"].push_back({{"path", f.path}, {"bytes", f.bytes}, {"xxh3_128", f.xxh3_128}});
  }
  if (res.mblt_kept) {
    j["mblt"] = s.mblt;
    j["mblt_bytes"] = s.mblt_bytes;
    j["sidecar"] = s.sidecar;
    j["sidecar_bytes"] = s.sidecar_bytes;
  }
  nlohmann::json rest = {{"seconds", s.seconds},
                         {"quantized_linears", s.quantized_linears},
                         {"float_linears", s.float_linears},
                         {"second_images", s.second_images},
                         {"samples", s.samples},
                         {"tokens", s.tokens},
                         {"source_types", source_types}};
  j.update(rest);
  if (!s.imported_json.empty()) j["imported_weights"] = nlohmann::json::parse(s.imported_json);
  if (r.compile) {
    int64_t peak = 0;
    for (int64_t p : res.memory.sram_peak) peak = std::max(peak, p);
    if (res.vision.present) {
      j["vision"] = {{"compiled", res.vision.compiled}};
      if (res.vision.compiled) {
        j["vision"]["feature_rows"] = res.vision.rows;
        j["vision"]["feature_width"] = res.vision.width;
        j["vision"]["deepstack_levels"] = res.vision.deepstack_levels;
        j["vision"]["views_per_image"] = res.vision.views;
        j["vision"]["dram_bytes"] = res.vision.dram_bytes;
        j["vision"]["calibration_images"] = res.vision.calibration_images;
        j["vision"]["synthetic_calibration"] = res.vision.synthetic_calibration;
        j["vision"]["block_sqnr_db"] = tower_block_json(res.vision.block_errors);
        j["vision"]["seconds"] = res.vision.seconds;
      } else {
        j["vision"]["reason"] = res.vision.reason;
      }
    }
    if (res.budget) {
      j["bit_budget"] = nlohmann::json::parse(bit_budget_json(*res.budget));
      j["bit_budget"]["compiled_weights_bytes"] = res.memory.dram.weights;
    }
    j["backend"] = {{"seconds", res.backend_seconds},
                    {"write_seconds", res.write_seconds},
                    {"dram_total_bytes", res.memory.dram.total()},
                    {"sram_peak_bytes", peak},
                    {"program_bytes", res.memory.program_bytes}};
  }
  j["passes"] = nlohmann::json::array();
  for (const TimedStep& p : res.steps())
    j["passes"].push_back({{"stage", p.stage}, {"name", p.name}, {"seconds", p.seconds}});
  j["stages"] = nlohmann::json::array();
  for (const pass::PassRecord& p : res.stages)
    j["stages"].push_back({{"name", p.name}, {"seconds", p.seconds}});
  return j.dump();
}

StatusOr<PipelineListing> list_pipeline(const CompileRequest& r,
                                        const config::ResolvedConfig& cfg) {
  QBC_ASSIGN_OR_RETURN(std::vector<pass::PipelineEntry> entries,
                       quant::quant_pipeline(cfg.options));
  const pass::Instrumentation& instr = r.run.instrumentation;
  QBC_RETURN_IF_ERROR(quant::check_instrumentation(entries, quant_part(r)));
  PipelineListing out;
  out.text = pass::format_pipeline("quant", entries, instr.disabled);
  out.json = "{\"pipeline\": " + pass::pipeline_json(entries, instr.disabled);
  if (r.compile) {
    // Then the backend's passes (the npu-compile pipeline), as compile runs them.
    QBC_RETURN_IF_ERROR(npu::check_instrumentation("npu-compile", instr));
    QBC_ASSIGN_OR_RETURN(std::vector<pass::PipelineEntry> npu_entries,
                         npu::pipeline("npu-compile"));
    out.text += pass::format_pipeline("npu", npu_entries, instr.disabled);
    out.json += ", \"backend\": " + pass::pipeline_json(npu_entries, instr.disabled);
  }
  out.json += ", \"stages\": " + pass::pipeline_json(compile_stages(r), {}) + "}";
  return out;
}

StatusOr<ShapeForBackend> shape_for_backend(const ir::Graph& g, const config::ResolvedConfig& cfg) {
  ShapeForBackend s;
  QBC_ASSIGN_OR_RETURN(s.graph, quant::shape_only(g, cfg.options));
  QBC_ASSIGN_OR_RETURN(s.options, backend_options(s.graph, cfg));
  return s;
}

}  // namespace qbc::driver
