// qbc quantize, qbc compile: a shell over the driver's compile pipeline (driver/compile.h).
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "qbc/driver/compile.h"
#include "qbc/support/cancel.h"
#include "qbc/support/logging.h"
#include "qbc_git_describe.h"

namespace qbc::cli {
namespace {

struct QuantizeOptions {
  std::string command;
  ConfigFlags config;
  std::string model;
  std::string output;
  std::string keep_intermediate;
  std::string images;
  std::string report;
  int threads = 0;
  bool print_pipeline = false;
  bool no_resume = false;
  std::string target_size;    ///< compile --target-size
  std::string target_decode;  ///< compile --target-decode-tok-s
  pass::Instrumentation instr;
};

/// --target-size / --target-decode-tok-s as the driver's request (at most one of them).
StatusOr<driver::BitBudgetRequest> budget_request(const QuantizeOptions& o) {
  driver::BitBudgetRequest b;
  if (!o.target_size.empty() && !o.target_decode.empty())
    return invalid_argument("--target-size and --target-decode-tok-s: give one budget");
  if (!o.target_size.empty()) {
    b.kind = driver::BitBudgetRequest::Kind::kSize;
    b.flag = "--target-size " + o.target_size;
    QBC_ASSIGN_OR_RETURN(b.target, driver::parse_size(o.target_size, "--target-size"));
  } else if (!o.target_decode.empty()) {
    b.kind = driver::BitBudgetRequest::Kind::kDecode;
    b.flag = "--target-decode-tok-s " + o.target_decode;
    size_t used = 0;
    try {
      b.target = std::stod(o.target_decode, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != o.target_decode.size() || !(b.target > 0) || !std::isfinite(b.target))
      return invalid_argument("--target-decode-tok-s '", o.target_decode,
                              "': not a positive number of tokens per second");
  }
  return b;
}

driver::CompileRequest request(const QuantizeOptions& o) {
  driver::CompileRequest r;
  r.compile = o.command == "compile";
  r.model = o.model;
  r.output = o.output;
  r.keep_intermediate = o.keep_intermediate;
  r.images = o.images;
  r.resume = !o.no_resume;
  r.run.producer = "qbc " QBC_VERSION " (" QBC_GIT_DESCRIBE ")";
  r.run.threads = o.threads;
  r.run.instrumentation = o.instr;
  return r;
}

Status print_pipeline(const QuantizeOptions& o) {
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, resolve_config(o.config));
  driver::CompileRequest r = request(o);
  QBC_ASSIGN_OR_RETURN(r.budget, budget_request(o));  // lists the bits stage, checks the flag
  QBC_ASSIGN_OR_RETURN(driver::PipelineListing l, driver::list_pipeline(r, cfg));
  std::fwrite(l.text.data(), 1, l.text.size(), stdout);
  std::fflush(stdout);
  events::result(o.command, l.json);
  return ok_status();
}

Status run_quantize(const QuantizeOptions& o) {
  if (o.print_pipeline) return print_pipeline(o);
  // Ctrl-C / SIGTERM stop the work at its next safe point; the status unwinds through the
  // driver's cleanups (temporary folder, sidecar, MXQ temporaries), so nothing partial is left.
  cancel::SignalScope signals;
  driver::CompileRequest r = request(o);
  QBC_ASSIGN_OR_RETURN(r.budget, budget_request(o));
  QBC_RETURN_IF_ERROR(driver::check_request(r));
  // The configuration, its lengths fitted to the model's config.json, before the model is
  // parsed; the driver checks the calibration source and the output folder next.
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, resolve_for_model(o.config, o.model));
  QBC_ASSIGN_OR_RETURN(driver::CompileResult res, driver::run_compile(r, cfg));
  std::string json = driver::summary_json(r, res);
  if (r.compile && !o.report.empty()) {
    QBC_RETURN_IF_ERROR(
        write_report(o.output, o.report, "", res.effective ? &*res.effective : &cfg, res.steps()));
    nlohmann::json j = nlohmann::json::parse(json);
    j["report"] = o.report;
    json = j.dump();
  }
  events::summary(o.command, driver::summary_text(r, res), json);
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
    cmd->add_option("--images", o->images,
                    "A VLM folder's vision calibration images: the PNG and JPEG files of DIR, "
                    "preprocessed as the model's preprocessor_config.json says (default: 4 "
                    "synthetic images, said in the summary). The vision part goes into the MXQ "
                    "(docs/multimodal.md)");
    cmd->add_option("--target-size", o->target_size,
                    "Bits by budget: choose which decoder-block linears keep 8-bit weights and "
                    "which go to 4 bits so that the DRAM weights (as `qbc plan` counts them) are "
                    "at most SIZE (GiB, or with a unit: 900MiB, 1.5GiB, 2GB). Each linear's "
                    "4-bit output error is measured on the calibration data; the most sensitive "
                    "per weight keep 8 bits. The choice is written into the configuration the "
                    "MXQ stores (bit.layerOverrides.weight8Bits; `qbc dump-config OUT.mxq`) "
                    "(docs/quantization.md \"Bits by budget\")")
        ->group("Bits by budget");
    cmd->add_option("--target-decode-tok-s", o->target_decode,
                    "Bits by budget: as --target-size, for a predicted decode of at least R "
                    "tokens/s (the cost model's estimate on the fastest scheme)")
        ->group("Bits by budget");
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
  cmd->add_flag("--no-resume", o->no_resume,
                "Start over: do not resume from (and remove) the checkpoints an interrupted run "
                "left in OUT.qbc-resume/, and write none. By default every finished calibration "
                "block is checkpointed there, and a run on the same inputs resumes from them");
  cmd->add_flag("--print-pipeline", o->print_pipeline,
                "Print the passes the configuration enables, in order, with the key that enables "
                "each, and exit")
      ->group("Pipeline");
  cmd->add_option(
         "--disable-pass", o->instr.disabled,
         "Do not run pass NAME (a name of --print-pipeline; repeatable). calibrate, "
         "quantizeRtn and phaseImages are fixed; of the backend's passes (compile) only the checks "
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
