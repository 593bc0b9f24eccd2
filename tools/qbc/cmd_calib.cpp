// qbc calib prepare: calibration samples from text, embedded with the model's own table.
#include "cli.h"
#include "qbc/driver/calib_prepare.h"
#include "qbc/support/cancel.h"
#include "qbc/support/logging.h"
#include "qbc_git_describe.h"

namespace qbc::cli {
namespace {

struct CalibPrepareOptions {
  ConfigFlags config;
  driver::CalibPrepareRequest request;
};

Status run_calib_prepare(const CalibPrepareOptions& o) {
  // Ctrl-C stops at the next sample; the temporary folder is removed on the way out.
  cancel::SignalScope signals;
  driver::CalibPrepareRequest r = o.request;
  r.producer = "qbc " QBC_VERSION " (" QBC_GIT_DESCRIBE ")";
  // Cheap checks first, so a typo fails before the model is loaded.
  QBC_RETURN_IF_ERROR(driver::check_calib_prepare(r));
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, resolve_config(o.config));
  QBC_ASSIGN_OR_RETURN(driver::CalibPrepareResult res, driver::prepare_calib(r, cfg));
  events::result("calib-prepare", driver::calib_prepare_json(res));
  return emit_output("", driver::calib_prepare_text(res));
}

}  // namespace

void register_calib(CLI::App& app, Action& action) {
  CLI::App* calib =
      app.add_subcommand("calib", "Calibration data: prepare samples for `qbc quantize`");
  calib->require_subcommand(1);
  auto o = std::make_shared<CalibPrepareOptions>();
  CLI::App* cmd = calib->add_subcommand(
      "prepare",
      "Cut --num-samples windows of --seq-len tokens from a text file at offsets drawn from "
      "--seed,\n"
      "start each with BOS when the model adds one, embed them with the model's embedding table "
      "and\n"
      "write DIR/sample_NNNN.npy ([1, seq, hidden] float32), npy_files.txt and provenance.json.\n"
      "Same arguments, same bytes. Use the folder with --calib DIR.");
  cmd->add_option("model", o->request.model, "HF folder, .gguf or .mblt")->required();
  cmd->add_option("--text", o->request.text, "Text file to cut windows from")->required();
  cmd->add_option("--num-samples", o->request.num_samples,
                  "Number of samples (default: calibration.numSamples, 128)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seq-len", o->request.seq_len,
                  "Tokens per sample (default: calibration.seqLength, 512)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("-o,--output", o->request.output,
                  "Output folder (absent or empty unless --force)")
      ->required();
  cmd->add_option("--images", o->request.images,
                  "A VLM folder's image-text calibration: a folder of PNG/JPEG images; sample i "
                  "holds image i mod N\n(its features from the float vision tower, between the "
                  "ids the prompt puts around an image)\nright after its first token");
  cmd->add_flag("--force", o->request.force, "Replace a non-empty output folder");
  add_config_flags(*cmd, o->config);
  cmd->callback([o, &action] { action = [o] { return run_calib_prepare(*o); }; });
}

}  // namespace qbc::cli
