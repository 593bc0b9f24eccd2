// qbc parse, qbc inspect: importing a model into MBLT and looking at the result (a shell over
// driver/parse_model.h, driver/inspect.h and, for an .mxq, driver/inspect_mxq.h).
#include <chrono>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "qbc/driver/inspect.h"
#include "qbc/driver/model_loader.h"
#include "qbc/driver/parse_model.h"
#include "qbc/driver/runnable.h"
#include "qbc/support/logging.h"
#include "qbc/support/progress.h"
#include "qbc_git_describe.h"

namespace qbc::cli {
namespace {

struct ParseOptions {
  ConfigFlags config;
  std::string model;
  std::string output;
};

Status run_parse(const ParseOptions& o) {
  if (o.output.empty()) return invalid_argument("parse: -o OUT.mblt is required");
  if (!driver::is_mblt_path(o.output))
    return invalid_argument("parse: output ", o.output, " must end in .mblt");
  const auto t0 = std::chrono::steady_clock::now();
  const std::string producer = "qbc " QBC_VERSION " (" QBC_GIT_DESCRIBE ")";
  // A VLM's vision tower goes to its own MBLT next to the language one (docs/multimodal.md).
  // A tower not built yet is reported (exit 3) after the language graph is written.
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, resolve_for_model(o.config, o.model));
  StatusOr<std::optional<driver::ParsedFile>> vision =
      driver::write_vision_mblt(o.model, o.output, producer, cfg.options.vision().image_size());
  if (!vision.ok() && vision.status().code() != Code::kUnimplemented) return vision.status();
  if (vision.ok() && *vision) {
    const driver::ParsedFile& v = **vision;
    events::summary("parse", "wrote " + v.path + " (vision: " + std::to_string(v.nodes) +
                                 " nodes, " + std::to_string(v.weights) + " weights, image " +
                                 v.image_size + ")");
  }
  QBC_ASSIGN_OR_RETURN(driver::ParsedFile f,
                       driver::write_model_mblt(o.model, cfg, o.output, producer));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::ordered_json r = {{"output", o.output},
                              {"bytes", f.bytes},
                              {"nodes", f.nodes},
                              {"weights", f.weights},
                              {"seconds", secs}};
  events::result("parse", r.dump());
  events::summary("parse",
                  "wrote " + o.output + " (" + std::to_string(f.bytes) + " bytes; " +
                      std::to_string(f.nodes) + " nodes, " + std::to_string(f.weights) +
                      " weights referenced in the source) in " + progress::format_duration(secs),
                  r.dump());
  return vision.ok() ? ok_status() : vision.status();
}

struct InspectOptions {
  std::string file;
  bool graph = false;
  bool json = false;
  bool memory = false;
  bool program = false;
  bool no_verify = false;
  bool cost = false;
  int64_t prompt_tokens = 240;
  std::string trace;
  ConfigFlags config;
};

Status run_inspect(const InspectOptions& o) {
  if (driver::is_compiled_model(o.file))
    return inspect_mxq(o.file, o.json, o.memory, o.program, o.no_verify, o.cost, o.prompt_tokens,
                       o.trace);
  if (!o.trace.empty()) {
    return invalid_argument("inspect --trace: ", o.file,
                            " is not an .mxq (the trace is the cost model's schedule of the "
                            "programs inside a compiled file)");
  }
  if (o.cost) {
    return invalid_argument("inspect --cost: ", o.file,
                            " is not an .mxq (the cost model times the programs inside a compiled "
                            "file; for a model folder or config.json use qbc plan)");
  }
  driver::GraphInspectRequest r;
  r.path = o.file;
  r.json = o.json;
  r.graph = o.graph;
  r.memory = o.memory;
  r.program = o.program;
  r.config = o.config;
  QBC_ASSIGN_OR_RETURN(driver::Inspection out, driver::inspect_graph(r));
  if (!out.event.empty()) events::result(out.event, out.event_json);
  return emit_output("", out.text);
}

}  // namespace

void register_parse(CLI::App& app, Action& action) {
  auto o = std::make_shared<ParseOptions>();
  CLI::App* cmd = app.add_subcommand(
      "parse",
      "Import a model (HF folder with config.json + safetensors, or a .gguf file) into an MBLT "
      "graph.\n"
      "Checks every tensor against the architecture; weights are referenced, not copied.");
  cmd->add_option("model", o->model, "HF model folder or .gguf file")->required();
  cmd->add_option("-o,--output", o->output, "Output .mblt file")->required();
  add_config_flags(*cmd, o->config);
  cmd->callback([o, &action] { action = [o] { return run_parse(*o); }; });
}

void register_inspect(CLI::App& app, Action& action) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect",
                                     "Summarise an MBLT file (architecture, inputs/outputs, "
                                     "parameters by part, dtypes, provenance)\n"
                                     "or a compiled MXQ (header, sections with sizes and digests, "
                                     "schemes, KV layout, provenance)");
  cmd->add_option("file", o->file,
                  ".mblt file, its text form .mblt.txt (qbc quantize --dump-after), or an .mxq "
                  "(or manifest)")
      ->required();
  cmd->add_flag("--no-verify", o->no_verify, "MXQ: skip the section digests");
  cmd->add_flag("--graph", o->graph, "Also print the graph in MBLT text form");
  cmd->add_flag("--json", o->json, "Print the summary (or the --memory plan) as JSON");
  cmd->add_flag("--memory", o->memory,
                "Compile for the configured target (shapes only; an .mxq: its own plan) and print "
                "the memory plan: "
                "DRAM map (weights, KV cache, activations, scratch, io, reserve vs the device), "
                "SRAM peak per core, program size; exit 4 when it does not fit");
  cmd->add_flag("--program", o->program,
                "Compile for the configured target and print the NPU programs in text form "
                "(docs/npu.md)");
  cmd->add_flag("--cost", o->cost,
                "MXQ: the cost model on the file's own programs, per scheme (TTFT, decode tok/s, "
                "roofline fraction, bound) and per node of the decode step (DRAM bytes, MACs, "
                "bound, time)");
  cmd->add_option("--prompt-tokens", o->prompt_tokens, "--cost: prompt length of the TTFT")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--trace", o->trace,
                  "MXQ: write the cost model's schedule of one prefill chunk and one decode step "
                  "(first scheme), every instruction on every core and queue, as a Chrome trace "
                  "event JSON file for ui.perfetto.dev or chrome://tracing");
  add_config_flags(*cmd, o->config);
  cmd->callback([o, &action] { action = [o] { return run_inspect(*o); }; });
}

}  // namespace qbc::cli
