// qbc report MODEL.mxq, compile --report and inspect --trace: the HTML compile report and
// the timeline trace (qbc_report) of a compiled file.
#include <nlohmann/json.hpp>

#include "cli.h"
#include "qbc/driver/plan.h"
#include "qbc/report/report.h"
#include "qbc/report/trace.h"
#include "qbc/support/file_util.h"
#include "qbc/support/logging.h"

namespace qbc::cli {
namespace {

struct ReportOptions {
  std::string file;
  std::string output;
  std::string accuracy;
  int64_t prompt_tokens = 240;
};

/// The origins of a file's stored configuration: only whether a value is the built-in
/// default (the layers it came from are known at compile time only).
std::vector<config::OriginRow> stored_origin_rows(const config::CompileOptions& options) {
  std::vector<config::OriginRow> rows = config::origin_rows(options, {});
  const std::vector<config::OriginRow> defaults = config::origin_rows(config::defaults(), {});
  for (config::OriginRow& r : rows) {
    bool is_default = false;
    for (const config::OriginRow& d : defaults)
      if (d.path == r.path) is_default = d.value == r.value;
    r.origin = is_default ? "default" : "stored in the MXQ";
  }
  return rows;
}

Status run_report(const ReportOptions& o) {
  return write_report(o.file, o.output, o.accuracy, nullptr, {}, o.prompt_tokens);
}

}  // namespace

Status write_report(const std::string& mxq_path, const std::string& output,
                    const std::string& accuracy, const config::ResolvedConfig* compiled,
                    const std::vector<report::PassTime>& passes, int64_t prompt_tokens) {
  QBC_ASSIGN_OR_RETURN(mxq::LoadedModel m, mxq::load_model(mxq_path));
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig stored, stored_config(mxq_path, m));
  report::ReportInput in;
  in.model_file = mxq_path;
  in.model_name = m.meta.model_name();
  in.producer = m.meta.producer() + " " + m.meta.producer_version();
  in.bundle = m.bundle.get();
  in.cost = driver::cost_params(stored.options.target());
  in.prompt_tokens = prompt_tokens;
  if (compiled != nullptr) {
    in.config = config::origin_rows(compiled->options, compiled->origins);
  } else {
    in.config = stored_origin_rows(stored.options);
    in.config_note =
        "Values as stored in the MXQ. The file keeps values, not origins: `qbc compile ... "
        "--report` records the file, line, preset or flag each value came from.";
  }
  in.passes = passes;
  if (passes.empty())
    in.passes_note =
        "Not recorded: pass times are known during a compile (`qbc compile ... "
        "--report`), the MXQ does not keep them.";
  if (!accuracy.empty()) {
    QBC_ASSIGN_OR_RETURN(std::string text, read_text_file(accuracy));
    QBC_ASSIGN_OR_RETURN(in.accuracy, report::parse_accuracy_json(text, accuracy));
  }
  QBC_ASSIGN_OR_RETURN(std::string html, report::render_html(in));
  QBC_RETURN_IF_ERROR(write_file_atomic(output, html));
  events::summary("report", "wrote " + output + " (" + std::to_string(html.size()) + " bytes)",
                  nlohmann::json({{"report", output}, {"bytes", html.size()}}).dump());
  return ok_status();
}

Status write_trace(const std::string& mxq_path, const mxq::LoadedModel& m,
                   const std::string& output) {
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, stored_config(mxq_path, m));
  const isa::Bundle& b = *m.bundle;
  if (b.modes.empty()) return invalid_argument(mxq_path, ": the file holds no program");
  const isa::Mode& mode = b.modes.front();
  QBC_ASSIGN_OR_RETURN(std::vector<report::TraceCall> calls,
                       report::trace_calls(b, mode, driver::cost_params(cfg.options.target())));
  const std::string json = report::chrome_trace_json(b, mode, calls);
  QBC_RETURN_IF_ERROR(write_file_atomic(output, json));
  size_t spans = 0;
  std::string figures;
  for (const report::TraceCall& c : calls) {
    spans += c.cost.spans.size();
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%s%s %.1f us", figures.empty() ? "" : ", ", c.name.c_str(),
                  c.cost.seconds * 1e6);
    figures += buf;
  }
  events::summary("trace",
                  "wrote " + output + " (" + std::to_string(spans) + " instructions of the " +
                      isa::scheme_name(mode.scheme) + " mode on " +
                      std::to_string(mode.cores_per_instance) + " core" +
                      (mode.cores_per_instance > 1 ? "s" : "") + ": " + figures +
                      "; cost model estimate, open in ui.perfetto.dev)",
                  nlohmann::json({{"trace", output}, {"events", spans}}).dump());
  return ok_status();
}

void register_report(CLI::App& app, Action& action) {
  auto o = std::make_shared<ReportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "report",
      "Write the HTML report of a compiled MXQ: one self-contained file (inline SVG, no script)\n"
      "with the configuration, the weight bits per projection, the DRAM map and SRAM use per\n"
      "core, the cost model's time and bound per node for a prefill chunk and a decode step,\n"
      "and with --accuracy the per-layer SQNR and KL divergence. `qbc compile --report` writes\n"
      "the same with the origin of every configuration value and the pass times.");
  cmd->add_option("file", o->file, "A compiled .mxq (or manifest)")->required();
  cmd->add_option("-o,--output", o->output, "The HTML file to write")->required();
  cmd->add_option("--accuracy", o->accuracy,
                  "The JSON of `qbc eval MODEL --reference REF --json` to show per-layer SQNR and "
                  "KLD");
  cmd->add_option("--prompt-tokens", o->prompt_tokens,
                  "The decode step of the cost model runs after this many tokens")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->callback([o, &action] { action = [o] { return run_report(*o); }; });
}

}  // namespace qbc::cli
