// qbc quantize, qbc compile: calibration and quantization of a model.
#include "cli.h"
#include "qbc_git_describe.h"
#include "qbc/driver/quantize.h"
#include "qbc/support/logging.h"

namespace qbc::cli {
namespace {

struct QuantizeOptions {
  ConfigFlags config;
  std::string model;
  std::string output;
  int threads = 0;
};

Status run_quantize(const QuantizeOptions& o) {
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, resolve_config(o.config));
  QBC_ASSIGN_OR_RETURN(driver::LoadedModel m, driver::open_model(o.model, cfg));
  return driver::quantize_to(m, cfg, o.output, "qbc " QBC_VERSION " (" QBC_GIT_DESCRIBE ")", o.threads);
}

void register_quantize_like(CLI::App& app, Action& action, const char* name, const char* help) {
  auto o = std::make_shared<QuantizeOptions>();
  CLI::App* cmd = app.add_subcommand(name, help);
  cmd->add_option("model", o->model, "HF folder, .gguf, or an .mblt from `qbc parse`")->required();
  cmd->add_option("-o,--output", o->output,
                  "Output .mblt; the integer weights go to OUT.weights.safetensors beside it")
      ->required();
  cmd->add_option("--threads", o->threads,
                  "Compute threads of the float calibration runs (0 = all cores); the output is the same for any value");
  add_config_flags(*cmd, o->config);
  cmd->callback([o, &action] { action = [o] { return run_quantize(*o); }; });
}

}  // namespace

void register_quantize(CLI::App& app, Action& action) {
  register_quantize_like(
      app, action, "quantize",
      "Calibrate and quantize a model per the bit configuration: the enabled equivalence transforms\n"
      "(equivalentTransformation.*), block-by-block calibration (one block's weights in memory),\n"
      "round-to-nearest weights with per-output-channel scales, per-token or static activation\n"
      "scales (bit.activationScaling), a quantized KV cache (docs/numerics.md, docs/quantization.md).\n"
      "Calibration data: --calib DIR (from `qbc calib prepare`) or --use-random-calib.\n"
      "-v prints the wall time of every stage.");
  register_quantize_like(app, action, "compile",
                         "Parse and quantize in one step (the backend stages follow in later releases).");
}

}  // namespace qbc::cli
