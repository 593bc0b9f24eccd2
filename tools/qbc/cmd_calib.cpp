// qbc calib prepare: calibration samples from text, embedded with the model's own table.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "qbc/calib/calib_data.h"
#include "qbc/calib/prepare.h"
#include "qbc/driver/generate.h"
#include "qbc/driver/model_loader.h"
#include "qbc/support/cancel.h"
#include "qbc/support/logging.h"
#include "qbc_git_describe.h"

namespace qbc::cli {
namespace {

struct CalibPrepareOptions {
  ConfigFlags config;
  std::string model;
  std::string text;
  int64_t num_samples = 0;  // 0: calibration.numSamples from the configuration
  int64_t seq_len = 0;      // 0: calibration.seqLength from the configuration
  std::string output;
  bool force = false;
};

Status run_calib_prepare(const CalibPrepareOptions& o) {
  // Ctrl-C stops at the next sample; the temporary folder is removed on the way out.
  cancel::SignalScope signals;
  namespace fs = std::filesystem;
  // Cheap checks first, so a typo fails before the model is loaded.
  QBC_RETURN_IF_ERROR(calib::check_output_dir(o.output, o.force));
  std::error_code ec;
  if (!fs::is_regular_file(o.text, ec)) return not_found(o.text, ": no such text file (--text)");
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, resolve_config(o.config));
  calib::PrepareOptions po;
  po.text_path = o.text;
  po.out_dir = o.output;
  po.num_samples = o.num_samples > 0 ? o.num_samples : cfg.options.calibration().num_samples();
  po.seq_len = o.seq_len > 0 ? o.seq_len : cfg.options.calibration().seq_length();
  po.seed = static_cast<uint64_t>(cfg.options.seed());
  po.force = o.force;

  QBC_ASSIGN_OR_RETURN(driver::LoadedModel m, driver::open_model(o.model, cfg));
  QBC_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, driver::load_tokenizer(m));
  const std::vector<calib::CalibInputSpec> inputs = calib::calib_input_specs(m.graph);
  if (inputs.size() != 1) {
    return unimplemented(o.model,
                         ": calib prepare needs a model with one float input, this one has ",
                         inputs.size());
  }
  QBC_ASSIGN_OR_RETURN(const ir::Weight* emb, calib::find_host_embedding(m.graph));
  calib::EmbeddingTable table;
  table.vocab = emb->type.dims[0];
  table.hidden = emb->type.dims[1];
  if (table.hidden != inputs[0].hidden) {
    return invalid_argument(o.model, ": host embedding '@", emb->name, "' rows have ", table.hidden,
                            " values but the graph input ", inputs[0].name, " takes ",
                            inputs[0].hidden);
  }
  QBC_RETURN_IF_ERROR(driver::read_weight(m, *emb, &table.data));
  po.input_name = inputs[0].name;

  calib::PrepareProvenance prov;
  prov.model = o.model;
  prov.source_path = m.graph.source_path;
  prov.source_format = m.graph.source_format;
  prov.files = m.graph.files;
  prov.tokenizer_path = m.source ? m.source->tokenizer_path().string() : "";
  prov.producer = "qbc " QBC_VERSION " (" QBC_GIT_DESCRIBE ")";
  events::status("calib", "preparing " + std::to_string(po.num_samples) + " samples of " +
                              std::to_string(po.seq_len) + " tokens");
  QBC_ASSIGN_OR_RETURN(calib::PrepareResult r, calib::prepare_calib_dir(po, tok, table, prov));

  const std::string shape = calib::shape_string({1, po.seq_len, table.hidden});
  nlohmann::ordered_json j = {{"output", o.output},
                              {"samples", po.num_samples},
                              {"shape", {1, po.seq_len, table.hidden}},
                              {"text_tokens", r.num_tokens},
                              {"seed", po.seed},
                              {"bos_replaced", r.bos_replaced}};
  events::result("calib-prepare", j.dump());
  std::ostringstream os;
  os << "wrote " << po.num_samples << " samples " << shape << " float32 to " << o.output << " ("
     << r.num_tokens << " text tokens, seed " << po.seed << ")\n";
  return emit_output("", os.str());
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
  cmd->add_option("model", o->model, "HF folder, .gguf or .mblt")->required();
  cmd->add_option("--text", o->text, "Text file to cut windows from")->required();
  cmd->add_option("--num-samples", o->num_samples,
                  "Number of samples (default: calibration.numSamples, 128)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seq-len", o->seq_len,
                  "Tokens per sample (default: calibration.seqLength, 512)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("-o,--output", o->output, "Output folder (absent or empty unless --force)")
      ->required();
  cmd->add_flag("--force", o->force, "Replace a non-empty output folder");
  add_config_flags(*cmd, o->config);
  cmd->callback([o, &action] { action = [o] { return run_calib_prepare(*o); }; });
}

}  // namespace qbc::cli
