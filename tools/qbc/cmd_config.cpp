// qbc dump-config, qbc presets, qbc targets: inspecting configuration.
#include <nlohmann/json.hpp>

#include "cli.h"
#include "qbc/driver/catalog.h"
#include "qbc/driver/config_dump.h"
#include "qbc/support/logging.h"

namespace qbc::cli {
namespace {

struct DumpOptions {
  std::string model;
  ConfigFlags config;
  std::string output;
  std::string format;
  bool origins = false;
  bool reference = false;
};

Status run_dump_config(const DumpOptions& o) {
  if (o.reference) return emit_output(o.output, driver::config_reference());
  QBC_ASSIGN_OR_RETURN(const std::string format, driver::dump_format(o.format, o.output));
  const bool compiled = !o.model.empty() && mxq::is_mxq_file(o.model);
  if (compiled) {
    if (o.origins)
      return invalid_argument(
          "dump-config: --origins needs a model folder, config.json, .gguf or .mblt, or no "
          "MODEL (an MXQ keeps values, not origins)");
    return dump_config_mxq(o.model, format, o.output);
  }
  // With a model (not compiled): the configuration compile would use for it, the sequence
  // and cache lengths fitted to the length it was trained for.
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, o.model.empty()
                                                       ? resolve_config(o.config)
                                                       : resolve_for_model(o.config, o.model));
  if (o.origins) return emit_output(o.output, driver::config_origins(cfg));
  const std::string json = driver::config_text(cfg.options, "json");
  events::result("dump-config", json);
  const std::string text = format == "json" ? json : driver::config_text(cfg.options, "yaml");
  QBC_RETURN_IF_ERROR(emit_output(o.output, text));
  if (!o.output.empty() && o.output != "-") {
    events::summary("dump-config", "wrote " + o.output + " (" + format + ", " +
                                       std::to_string(text.size()) +
                                       " bytes, every key of the effective configuration)");
  }
  return ok_status();
}

// A listing as text, or with --json its JSON indented by two spaces.
Status print_listing(const char* command, const driver::CatalogListing& l, bool as_json) {
  events::result(command, l.json);
  return emit_output("", as_json ? nlohmann::ordered_json::parse(l.json).dump(2) + "\n" : l.text);
}

Status run_presets(bool as_json) {
  return print_listing("presets", driver::list_presets(), as_json);
}

Status run_targets(const std::string& name, bool as_json) {
  QBC_ASSIGN_OR_RETURN(driver::CatalogListing l,
                       name.empty() ? driver::list_targets() : driver::describe_target(name));
  return print_listing("targets", l, as_json);
}

}  // namespace

void register_dump_config(CLI::App& app, Action& action) {
  auto opts = std::make_shared<DumpOptions>();
  CLI::App* cmd = app.add_subcommand(
      "dump-config",
      "Print the fully resolved configuration: every key with its value, in schema order.\n"
      "Layers, lowest first: built-in defaults < target profile < --preset < -c files (in order) "
      "<\n"
      "--set key=value (in order) < explicit flags. The output loads back unchanged with -c.\n"
      "With MODEL.mxq: the configuration that file was compiled with (recompiles to the same "
      "bytes).\n"
      "With a model folder, config.json, .gguf or .mblt: the configuration compile would use "
      "for it\n"
      "(sequence and cache lengths no longer than the model was trained for, unless set).");
  cmd->add_option("model", opts->model,
                  "A compiled .mxq (or manifest) to read the configuration of, or a model to "
                  "resolve the configuration for");
  add_config_flags(*cmd, opts->config);
  add_context_flags(*cmd, opts->config);
  cmd->add_option("-o,--output", opts->output,
                  "Write to this file (.yaml/.yml or .json) instead of stdout");
  cmd->add_option("--format", opts->format,
                  "Output format: yaml | json (default: from -o, else yaml)")
      ->check(CLI::IsMember({"yaml", "json"}));
  cmd->add_flag("--origins", opts->origins,
                "Print each key with the file:line (or default/preset/--set) its value came from");
  cmd->add_flag("--reference", opts->reference,
                "Print the Markdown key reference (types, defaults, ranges) instead of a config");
  cmd->callback([opts, &action] { action = [opts] { return run_dump_config(*opts); }; });
}

void register_presets(CLI::App& app, Action& action) {
  auto as_json = std::make_shared<bool>(false);
  CLI::App* cmd =
      app.add_subcommand("presets", "List the built-in presets with a one-line description");
  cmd->add_flag("--json", *as_json, "Print as JSON");
  cmd->callback([as_json, &action] { action = [as_json] { return run_presets(*as_json); }; });
}

void register_targets(CLI::App& app, Action& action) {
  auto name = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "targets",
      "List the built-in hardware target profiles, or show one (NAME or a .yaml path) with each\n"
      "number marked as a vendor fact or our assumption, with its source or reasoning");
  cmd->add_option("name", *name, "Profile to show");
  cmd->add_flag("--json", *as_json, "Print as JSON");
  cmd->callback([name, as_json, &action] {
    action = [name, as_json] { return run_targets(*name, *as_json); };
  });
}

}  // namespace qbc::cli
