// qbc dump-config, qbc presets, qbc targets: inspecting configuration.
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"
#include "qbc/config/presets.h"
#include "qbc/config/target.h"
#include "qbc/support/logging.h"

namespace qbc::cli {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

struct DumpOptions {
  std::string model;
  ConfigFlags config;
  std::string output;
  std::string format;
  bool origins = false;
  bool reference = false;
};

Status run_dump_config(const DumpOptions& o) {
  if (o.reference) return emit_output(o.output, config::reference_markdown());
  std::string format = o.format;
  if (format.empty()) format = ends_with(o.output, ".json") ? "json" : "yaml";
  if (!o.output.empty() && format == "json" &&
      (ends_with(o.output, ".yaml") || ends_with(o.output, ".yml"))) {
    return invalid_argument("--format json conflicts with output file name ", o.output);
  }
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
  if (o.origins) return emit_output(o.output, config::origins_table(cfg.options, cfg.origins));
  const std::string json = config::to_json(cfg.options);
  events::result("dump-config", json);
  const std::string text = format == "json" ? json : config::to_yaml(cfg.options);
  QBC_RETURN_IF_ERROR(emit_output(o.output, text));
  if (!o.output.empty() && o.output != "-") {
    events::summary("dump-config", "wrote " + o.output + " (" + format + ", " +
                                       std::to_string(text.size()) +
                                       " bytes, every key of the effective configuration)");
  }
  return ok_status();
}

Status run_presets(bool as_json) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  std::ostringstream os;
  for (const config::Preset& p : config::presets()) {
    list.push_back({{"name", p.name}, {"description", p.description}, {"path", p.path}});
    os << p.name << std::string(p.name.size() < 12 ? 12 - p.name.size() : 1, ' ') << p.description
       << "\n";
  }
  events::result("presets", list.dump());
  return emit_output("", as_json ? list.dump(2) + "\n" : os.str());
}

Status run_targets(const std::string& name, bool as_json) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  std::ostringstream os;
  if (name.empty()) {
    for (const std::string& n : config::builtin_target_names()) {
      QBC_ASSIGN_OR_RETURN(config::TargetFile t, config::load_target(n));
      out.push_back({{"name", n},
                     {"description", t.profile.description()},
                     {"cores", config::total_cores(t.profile)},
                     {"path", t.path}});
      os << n << std::string(n.size() < 12 ? 12 - n.size() : 1, ' ') << t.profile.description()
         << "\n";
    }
  } else {
    QBC_ASSIGN_OR_RETURN(config::TargetFile t, config::load_target(name));
    nlohmann::ordered_json profile = nlohmann::ordered_json::parse([&] {
      config::CompileOptions o;
      *o.mutable_target() = t.profile;
      return config::to_json(o);
    }())["target"];
    os << "# " << t.path << "\n";
    for (auto& [key, value] : profile.items()) {
      auto it = t.provenance.find(key);
      std::string kind = "unspecified", note;
      if (it != t.provenance.end()) {
        kind = it->second.kind() == config::PROVENANCE_KIND_FACT     ? "fact"
               : it->second.kind() == config::PROVENANCE_KIND_FITTED ? "fitted"
                                                                     : "assumption";
        note = it->second.note();
      }
      out.push_back({{"key", key}, {"value", value}, {"kind", kind}, {"note", note}});
      os << key << ": " << value.dump() << "\n    [" << kind << "] " << note << "\n";
    }
  }
  events::result("targets", out.dump());
  return emit_output("", as_json ? out.dump(2) + "\n" : os.str());
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
