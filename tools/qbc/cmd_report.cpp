// qbc report MODEL.mxq, compile --report and inspect --trace: the HTML compile report and
// the timeline trace of a compiled file (a shell over driver/report.h and driver/cost_trace.h).
#include <nlohmann/json.hpp>

#include "cli.h"
#include "qbc/driver/cost_trace.h"
#include "qbc/driver/report.h"
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

Status run_report(const ReportOptions& o) {
  return write_report(o.file, o.output, o.accuracy, nullptr, {}, o.prompt_tokens);
}

}  // namespace

Status write_report(const std::string& mxq_path, const std::string& output,
                    const std::string& accuracy, const config::ResolvedConfig* compiled,
                    const std::vector<driver::TimedStep>& steps, int64_t prompt_tokens) {
  driver::ReportRequest r;
  r.mxq_path = mxq_path;
  r.output = output;
  r.accuracy = accuracy;
  r.compiled = compiled;
  r.steps = steps;
  r.prompt_tokens = prompt_tokens;
  QBC_ASSIGN_OR_RETURN(size_t bytes, driver::write_report(r));
  events::summary("report", "wrote " + output + " (" + std::to_string(bytes) + " bytes)",
                  nlohmann::json({{"report", output}, {"bytes", bytes}}).dump());
  return ok_status();
}

Status write_trace(const std::string& mxq_path, const mxq::LoadedModel& m,
                   const std::string& output) {
  QBC_ASSIGN_OR_RETURN(driver::CostTrace t, driver::cost_trace(mxq_path, m));
  QBC_RETURN_IF_ERROR(write_file_atomic(output, t.json));
  events::summary("trace",
                  "wrote " + output + " (" + std::to_string(t.spans) + " instructions of the " +
                      t.scheme + " mode on " + std::to_string(t.cores) + " core" +
                      (t.cores > 1 ? "s" : "") + ": " + t.figures +
                      "; cost model estimate, open in ui.perfetto.dev)",
                  nlohmann::json({{"trace", output}, {"events", t.spans}}).dump());
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
