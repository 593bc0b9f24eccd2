// qbc quantize, qbc compile: calibration and quantization of a model.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "qbc/driver/backend.h"
#include "qbc/driver/mxq_output.h"
#include "qbc/driver/quantize.h"
#include "qbc/npu/compile.h"
#include "qbc/npu/memory_plan.h"
#include "qbc/quant/pipeline.h"
#include "qbc/quant/shape_only.h"
#include "qbc/support/cancel.h"
#include "qbc/support/logging.h"
#include "qbc/support/progress.h"
#include "qbc_git_describe.h"

namespace qbc::cli {
namespace {

struct QuantizeOptions {
  std::string command;
  ConfigFlags config;
  std::string model;
  std::string output;
  std::string keep_intermediate;
  std::string report;
  int threads = 0;
  bool print_pipeline = false;
  pass::Instrumentation instr;
};

/// "12.3 MiB": the one unit convention of plan, inspect and this summary.
std::string bytes_text(int64_t bytes) { return npu::human_bytes(bytes); }

/// The instrumentation without the backend's pass names (compile hands those to the
/// backend): what the quant pipeline is checked and run with.
pass::Instrumentation quant_part(const QuantizeOptions& o) {
  pass::Instrumentation q = o.instr;
  if (o.command != "compile") return q;
  const auto drop = [](std::vector<std::string>& v) {
    v.erase(
        std::remove_if(v.begin(), v.end(), [](const std::string& n) { return npu::is_pass(n); }),
        v.end());
  };
  drop(q.disabled);
  drop(q.dump_after);
  return q;
}

Status print_pipeline(const QuantizeOptions& o, const config::ResolvedConfig& cfg) {
  QBC_ASSIGN_OR_RETURN(std::vector<pass::PipelineEntry> entries,
                       quant::quant_pipeline(cfg.options));
  QBC_RETURN_IF_ERROR(quant::check_instrumentation(entries, quant_part(o)));
  std::string text = pass::format_pipeline("quant", entries, o.instr.disabled);
  std::string json = "{\"pipeline\": " + pass::pipeline_json(entries, o.instr.disabled);
  if (o.command == "compile") {
    // Then the backend's passes (the npu-compile pipeline), as compile runs them.
    QBC_RETURN_IF_ERROR(npu::check_instrumentation("npu-compile", o.instr));
    QBC_ASSIGN_OR_RETURN(std::vector<pass::PipelineEntry> npu_entries,
                         npu::pipeline("npu-compile"));
    text += pass::format_pipeline("npu", npu_entries, o.instr.disabled);
    json += ", \"backend\": " + pass::pipeline_json(npu_entries, o.instr.disabled);
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  events::result(o.command, json + "}");
  return ok_status();
}

Status run_quantize(const QuantizeOptions& o) {
  if (o.print_pipeline) {
    QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, resolve_config(o.config));
    return print_pipeline(o, cfg);
  }
  // Ctrl-C / SIGTERM stop the work at its next safe point; the status unwinds through the
  // cleanups below (temporary folder, sidecar, MXQ temporaries), so nothing partial is left.
  cancel::SignalScope signals;
  if (o.model.empty())
    return invalid_argument(o.command, ": the model (HF folder, .gguf or .mblt) is required");
  const bool compile = o.command == "compile";
  if (o.output.empty())
    return invalid_argument(o.command,
                            compile ? ": -o OUT.mxq is required" : ": -o OUT.mblt is required");
  namespace fs = std::filesystem;
  const auto ends_with = [](const std::string& s, const char* suffix) {
    const size_t n = std::strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
  };
  if (compile && ends_with(o.output, ".mblt"))
    return invalid_argument("compile: -o ", o.output, ": compile writes MXQ (-o OUT.mxq); ",
                            "`qbc quantize` writes the quantized MBLT, and --keep-intermediate "
                            "DIR keeps compile's");
  // Every input and flag is checked before the model is parsed and hashed: the
  // configuration (its lengths fitted to the model's config.json) and the calibration
  // source; the output folder below.
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, resolve_for_model(o.config, o.model));
  QBC_RETURN_IF_ERROR(driver::check_calibration_inputs(cfg));
  // compile: the quantized MBLT is an intermediate, kept in --keep-intermediate DIR or in a
  // temporary folder beside the output that is removed afterwards.
  std::string mblt_out = o.output;
  std::string temp_dir;
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    }
  } cleanup;
  if (compile) {
    const fs::path out(o.output);
    const fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      return not_found(o.output, ": output folder ", dir.string(), " does not exist");
    fs::path keep;
    if (!o.keep_intermediate.empty()) {
      keep = o.keep_intermediate;
      fs::create_directories(keep, ec);
      if (ec) return invalid_argument("--keep-intermediate ", keep.string(), ": ", ec.message());
    } else {
      std::string templ = (dir / ".qbc-compile-XXXXXX").string();
      if (mkdtemp(templ.data()) == nullptr)
        return invalid_argument(o.output, ": cannot create a temporary folder in ", dir.string());
      keep = templ;
      cleanup.dir = temp_dir = templ;
    }
    mblt_out = (keep / (out.stem().string() + ".mblt")).string();
  }
  QBC_ASSIGN_OR_RETURN(driver::LoadedModel m, driver::open_model(o.model, cfg));
  if (compile) {
    // The split is checked against the model's blocks before any work.
    QBC_RETURN_IF_ERROR(driver::split_boundaries(cfg, m.graph).status());
    // Does it fit the target? Decided from shapes before any calibration work (exit 4).
    QBC_ASSIGN_OR_RETURN(ir::Graph shape, quant::shape_only(m.graph, cfg.options));
    QBC_ASSIGN_OR_RETURN(npu::Options plan, driver::backend_options(shape, cfg));
    QBC_RETURN_IF_ERROR(npu::check_instrumentation("npu-compile", o.instr));
    pass::Instrumentation fit;
    fit.disabled = o.instr.disabled;  // --disable-pass check-fit skips this check too
    QBC_RETURN_IF_ERROR(npu::run_pipeline("npu-fit", shape, plan, nullptr, {}, fit).status());
  }
  driver::QuantizeRun run;
  run.producer = "qbc " QBC_VERSION " (" QBC_GIT_DESCRIBE ")";
  run.threads = o.threads;
  run.instrumentation = quant_part(o);
  QBC_ASSIGN_OR_RETURN(driver::QuantizeSummary s, driver::quantize_to(m, cfg, mblt_out, run));
  char figures[256];
  std::snprintf(figures, sizeof(figures),
                "%d linears quantized (%d left in float), calibrated on %zu samples",
                s.quantized_linears, s.float_linears, s.samples);
  std::string text = compile && temp_dir.empty()
                         ? "kept " + s.mblt + " (" + bytes_text(s.mblt_bytes) + ") and " +
                               s.sidecar + " (" + bytes_text(s.sidecar_bytes) + "); quantized in " +
                               progress::format_duration(s.seconds) + "; " + figures
                     : compile
                         ? "quantized in " + progress::format_duration(s.seconds) + "; " + figures
                         : "wrote " + s.mblt + " (" + bytes_text(s.mblt_bytes) + ") and " +
                               s.sidecar + " (" + bytes_text(s.sidecar_bytes) + ") in " +
                               progress::format_duration(s.seconds) + "; " + figures;
  // What happened per source type, e.g. "Q6_K: 3 tensors dequantized and re-quantized to W8".
  nlohmann::json source_types = nlohmann::json::array();
  std::string types_text;
  for (const driver::SourceTypeOutcome& t : s.source_types) {
    types_text += (types_text.empty() ? "; source types: " : "; ") + driver::describe(t);
    nlohmann::json requantized = nlohmann::json::object();
    for (const auto& [bits, n] : t.quantized) requantized["W" + std::to_string(bits)] = n;
    source_types.push_back({{"dtype", t.dtype},
                            {"tensors", t.tensors},
                            {"quantized", requantized},
                            {"host_embedding", t.host_embedding},
                            {"float", t.float_kept},
                            {"dequantized", !t.lossless_source}});
  }
  if (!s.imported_text.empty()) text += "; " + s.imported_text;
  nlohmann::json backend;
  nlohmann::json mxq_files = nlohmann::json::array();
  std::vector<report::PassTime> passes;
  for (const pass::PassRecord& r : s.passes) passes.push_back({"quant", r.name, r.seconds});
  if (compile) {
    // The backend on the quantized model: programs and memory plan, written as MXQ.
    const auto t0 = std::chrono::steady_clock::now();
    QBC_ASSIGN_OR_RETURN(driver::LoadedModel q, driver::open_model(s.mblt, cfg));
    QBC_ASSIGN_OR_RETURN(npu::Options bo, driver::backend_options(q.graph, cfg));
    QBC_ASSIGN_OR_RETURN(isa::Bundle b, driver::compile_backend(q, bo, o.instr));
    // The backend (lowering, memory plan, weight image) and the MXQ writer are timed apart:
    // the writer's time is mostly the disk's.
    const auto t1 = std::chrono::steady_clock::now();
    QBC_ASSIGN_OR_RETURN(std::vector<mxq::WrittenFile> files,
                         driver::write_mxq(q, b, cfg, o.output));
    int64_t total = 0;
    for (const mxq::WrittenFile& f : files) {
      total += f.bytes;
      mxq_files.push_back({{"path", f.path}, {"bytes", f.bytes}, {"xxh3_128", f.xxh3_128}});
    }
    const double secs = std::chrono::duration<double>(t1 - t0).count();
    const double write_secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    const npu::MemoryReport r = npu::memory_report(b);
    int64_t peak = 0;
    for (int64_t p : r.sram_peak) peak = std::max(peak, p);
    char line[512];
    std::snprintf(line, sizeof(line),
                  "; backend for %s in %s: DRAM %s of %s, SRAM peak %s per core, program %s; "
                  "MXQ written in %s",
                  b.target.c_str(), progress::format_duration(secs).c_str(),
                  npu::human_bytes(r.dram.total()).c_str(),
                  npu::human_bytes(r.device_bytes).c_str(), npu::human_bytes(peak).c_str(),
                  npu::human_bytes(r.program_bytes).c_str(),
                  progress::format_duration(write_secs).c_str());
    text += line;
    text =
        "wrote " + o.output + " (" + bytes_text(total) +
        (files.size() > 1 ? ", manifest of " + std::to_string(files.size() - 1) + " parts" : "") +
        "); " + text;
    passes.push_back({"backend", "compile", secs});
    passes.push_back({"mxq", "write", write_secs});
    backend = {{"seconds", secs},
               {"write_seconds", write_secs},
               {"dram_total_bytes", r.dram.total()},
               {"sram_peak_bytes", peak},
               {"program_bytes", r.program_bytes}};
  }
  text += types_text;
  nlohmann::json j;
  if (compile) {
    j["mxq"] = o.output;
    j["files"] = mxq_files;
  }
  if (!compile || temp_dir.empty()) {
    j["mblt"] = s.mblt;
    j["mblt_bytes"] = s.mblt_bytes;
    j["sidecar"] = s.sidecar;
    j["sidecar_bytes"] = s.sidecar_bytes;
  }
  nlohmann::json rest = {{"seconds", s.seconds},
                         {"quantized_linears", s.quantized_linears},
                         {"float_linears", s.float_linears},
                         {"samples", s.samples},
                         {"tokens", s.tokens},
                         {"source_types", source_types}};
  j.update(rest);
  if (!s.imported_json.empty()) j["imported_weights"] = nlohmann::json::parse(s.imported_json);
  if (!backend.is_null()) j["backend"] = backend;
  j["passes"] = nlohmann::json::array();
  for (const report::PassTime& p : passes)
    j["passes"].push_back({{"stage", p.stage}, {"name", p.name}, {"seconds", p.seconds}});
  if (compile && !o.report.empty()) {
    QBC_RETURN_IF_ERROR(write_report(o.output, o.report, "", &cfg, passes));
    j["report"] = o.report;
  }
  events::summary(o.command, text, j.dump());
  return ok_status();
}

void register_quantize_like(CLI::App& app, Action& action, const char* name, const char* help) {
  auto o = std::make_shared<QuantizeOptions>();
  o->command = name;
  CLI::App* cmd = app.add_subcommand(name, help);
  cmd->add_option("model", o->model, "HF folder, .gguf, or an .mblt from `qbc parse`");
  if (std::string(name) == "compile") {
    cmd->add_option("-o,--output", o->output,
                    "Output .mxq: one file, or with splitBlocks / splitParts the manifest, its "
                    "parts (OUT-00001-of-0000N.mxq) beside it. Written atomically");
    cmd->add_option("--keep-intermediate", o->keep_intermediate,
                    "Keep the quantized MBLT (DIR/OUT.mblt + DIR/OUT.weights.safetensors)");
    cmd->add_option("--report", o->report,
                    "Also write the HTML report (as `qbc report`, with the origin of every "
                    "configuration value and the pass times) to this file");
  } else {
    cmd->add_option("-o,--output", o->output,
                    "Output .mblt; the integer weights go to OUT.weights.safetensors beside it");
  }
  cmd->add_option("--threads", o->threads,
                  "Compute threads of the float calibration runs (0 = all cores); the output is "
                  "the same for any value");
  cmd->add_flag("--print-pipeline", o->print_pipeline,
                "Print the passes the configuration enables, in order, with the key that enables "
                "each, and exit")
      ->group("Pipeline");
  cmd->add_option("--disable-pass", o->instr.disabled,
                  "Do not run pass NAME (a name of --print-pipeline; repeatable). calibrate and "
                  "quantizeRtn are fixed; of the backend's passes (compile) only the checks "
                  "check-fit and check-context can be disabled")
      ->group("Pipeline");
  cmd->add_option("--dump-after", o->instr.dump_after,
                  "Write the graph as text MBLT after pass NAME, or after every pass with `all` "
                  "(repeatable); "
                  "`qbc inspect` reads the dumps. compile: after a backend pass, its plan or "
                  "programs as text (NN-pass.npu.txt)")
      ->group("Pipeline");
  cmd->add_option("--dump-dir", o->instr.dump_dir,
                  "Folder of the --dump-after files (NN-pass.mblt.txt)")
      ->capture_default_str()
      ->group("Pipeline");
  add_config_flags(*cmd, o->config);
  add_context_flags(*cmd, o->config);
  cmd->callback([o, &action] { action = [o] { return run_quantize(*o); }; });
}

}  // namespace

void register_quantize(CLI::App& app, Action& action) {
  register_quantize_like(app, action, "quantize",
                         "Calibrate and quantize a model; writes the quantized MBLT (OUT.mblt + "
                         "OUT.weights.safetensors).\n"
                         "The quant pipeline (--print-pipeline): the enabled equivalence "
                         "transforms (equivalentTransformation.*),\n"
                         "block-by-block calibration (one block's weights in memory), the weight "
                         "passes (searchWeightScale,\n"
                         "hessianQuant), round-to-nearest weights, per-token or static activation "
                         "scales (bit.activationScaling)\n"
                         "and a quantized KV cache (docs/numerics.md, docs/quantization.md).\n"
                         "Calibration data: --calib DIR (from `qbc calib prepare`) or "
                         "--use-random-calib (a smoke test: 8 samples\n"
                         "of 256 tokens unless calibration.numSamples / seqLength are set). -v "
                         "prints the wall time of every pass.");
  register_quantize_like(
      app, action, "compile",
      "Parse, quantize and run the ARIES backend in one step. Before calibrating it checks\n"
      "that the model fits the target (exit 4 with the memory table and the largest\n"
      "maxCacheLength and batchSize that fit). The backend's per-core programs, weights and\n"
      "memory plan are written as MXQ (docs/mxq.md), which `qbc run`, `eval`, `inspect` and\n"
      "`verify` read; --keep-intermediate DIR keeps the quantized MBLT.");
}

}  // namespace qbc::cli
