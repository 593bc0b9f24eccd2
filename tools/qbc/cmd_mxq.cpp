// qbc inspect MODEL.mxq, qbc verify: looking at and checking compiled MXQ files (a shell over
// driver/inspect_mxq.h and driver/verify_compiled.h).

#include "cli.h"
#include "qbc/driver/config_dump.h"
#include "qbc/driver/inspect_mxq.h"
#include "qbc/driver/verify_compiled.h"
#include "qbc/support/logging.h"

namespace qbc::cli {

Status dump_config_mxq(const std::string& path, const std::string& format,
                       const std::string& output) {
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, driver::stored_config(path));
  const std::string json = driver::config_text(cfg.options, "json");
  const std::string text = format == "json" ? json : driver::config_text(cfg.options, "yaml");
  events::result("dump-config", json);
  QBC_RETURN_IF_ERROR(emit_output(output, text));
  if (!output.empty() && output != "-") {
    events::summary("dump-config", "wrote " + output + " (" + format + ", " +
                                       std::to_string(text.size()) + " bytes, the configuration " +
                                       path + " was compiled with)");
  }
  return ok_status();
}

Status inspect_mxq(const std::string& path, bool json, bool memory, bool program, bool no_verify,
                   bool cost, int64_t prompt_tokens, const std::string& trace) {
  QBC_ASSIGN_OR_RETURN(mxq::LoadedModel m, driver::open_compiled(path, !no_verify));
  if (!trace.empty()) return write_trace(path, m, trace);
  driver::CompiledInspectRequest r;
  r.json = json;
  r.memory = memory;
  r.program = program;
  r.cost = cost;
  r.prompt_tokens = prompt_tokens;
  QBC_ASSIGN_OR_RETURN(driver::Inspection out, driver::inspect_compiled(path, m, r));
  if (!out.event.empty()) events::result(out.event, out.event_json);
  return emit_output("", out.text);
}

namespace {

struct VerifyOptions {
  std::string file;
  bool json = false;
  ConfigFlags target;  ///< --target-device / --target-profile: the target the file must be for
};

Status run_verify(const VerifyOptions& o) {
  QBC_ASSIGN_OR_RETURN(
      driver::VerifyOutcome r,
      driver::verify_compiled(o.file, o.target.target_device, o.target.target_profile));
  events::summary("verify", r.summary, r.json);
  if (o.json) return emit_output("", r.json_text);
  return ok_status();
}

}  // namespace

void register_verify(CLI::App& app, Action& action) {
  auto o = std::make_shared<VerifyOptions>();
  CLI::App* cmd = app.add_subcommand(
      "verify",
      "Check a compiled MXQ file or a split build's manifest: the header, the section table "
      "rules,\n"
      "every section's digest, the parts of a manifest (count, order, build), the decoded "
      "program\n"
      "against the verifier's invariants (docs/npu.md) and the device checks of every mode. "
      "Exit 0\n"
      "when every check passes, 2 with the file and section at fault otherwise.");
  cmd->add_option("file", o->file, ".mxq file or manifest")->required();
  cmd->add_flag("--json", o->json, "Print the result as JSON");
  cmd->add_option("--target-device", o->target.target_device,
                  "Also check that the file was compiled for this targetDevice (exit 2 naming "
                  "both otherwise)");
  cmd->add_option("--target-profile", o->target.target_profile,
                  "Also check that the file was compiled for this target profile (name or YAML "
                  "file)");
  cmd->callback([o, &action] { action = [o] { return run_verify(*o); }; });
}

}  // namespace qbc::cli
