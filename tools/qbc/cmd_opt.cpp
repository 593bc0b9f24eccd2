// `qbc opt`: named passes of either stage on a text file, the result as text (a shell over
// driver/opt.h; docs/cli.md "qbc opt", docs/testing.md "Golden tests").
#include <cstdio>
#include <memory>

#include "cli.h"
#include "qbc/driver/opt.h"
#include "qbc/support/file_util.h"

namespace qbc::cli {
namespace {

struct OptFlags {
  std::string input;
  std::string passes;
  std::string kind = "auto";
  std::string output;
  bool list = false;
  ConfigFlags config;
};

std::vector<std::string> split_passes(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    if (end > start) out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

std::string pass_list() {
  std::string text;
  char line[512];
  std::snprintf(line, sizeof(line), "%-18s %-6s %-14s %s\n", "pass", "stage", "input", "summary");
  text += line;
  for (const driver::OptPass& p : driver::opt_passes()) {
    std::snprintf(line, sizeof(line), "%-18s %-6s %-14s %s\n", p.name.c_str(), p.stage.c_str(),
                  p.input.c_str(), p.summary.c_str());
    text += line;
  }
  return text;
}

Status run_opt(const OptFlags& f) {
  if (f.list) return emit_output(f.output, pass_list());
  if (f.input.empty())
    return invalid_argument("qbc opt: give an input text file (or --list-passes)");
  driver::OptRequest r;
  r.label = f.input;
  QBC_ASSIGN_OR_RETURN(r.text, read_text_file(f.input));
  r.kind = f.kind == "mblt"      ? driver::TextKind::kMblt
           : f.kind == "program" ? driver::TextKind::kProgram
           : f.kind == "plan"    ? driver::TextKind::kPlan
                                 : driver::TextKind::kAuto;
  r.passes = split_passes(f.passes);
  QBC_ASSIGN_OR_RETURN(r.cfg, resolve_config(f.config));
  QBC_ASSIGN_OR_RETURN(const std::string out, driver::run_opt(r));
  return emit_output(f.output, out);
}

}  // namespace

void register_opt(CLI::App& app, Action& action) {
  auto f = std::make_shared<OptFlags>();
  CLI::App* cmd = app.add_subcommand(
      "opt",
      "Runs named passes of either stage on a text file and prints the result (the golden\n"
      "tests' driver, like mlir-opt). Inputs: MBLT text (qbc inspect --graph; docs/ir.md) or NPU\n"
      "program text (qbc inspect --program; docs/npu.md \"Text form\"), told apart by the first\n"
      "line ('bundle ...' is program text) unless --input-kind says. On MBLT text the quant\n"
      "passes run first (weights are values derived from each weight's name: a text carries\n"
      "none; passes that need calibration samples or statistics are refused), then the backend\n"
      "passes (shapes only), whose output is the plan text, or the program text once 'lower'\n"
      "ran. On program text only assign-tokens runs; no pass: parse and print. Plan text (a\n"
      "--dump-after of a planning pass; 'plan of graph ...') is parsed, verified (P1..P9) and\n"
      "printed back; no pass runs on it.\n"
      "Exit codes: 0 ok, 2 bad text (FILE:LINE:COL and the token) or a pass refusing its\n"
      "input, 3 an unknown pass or one that cannot run on the input kind (named), 4 a plan\n"
      "that does not fit the target.");
  cmd->add_option("input", f->input, "MBLT text, NPU program text or plan text file");
  cmd->add_option("--passes", f->passes,
                  "Comma-separated pass names, run in order (quant passes before backend passes)");
  cmd->add_option("--input-kind", f->kind, "auto (default), mblt, program or plan")
      ->check(CLI::IsMember({"auto", "mblt", "program", "plan"}));
  cmd->add_flag("--list-passes", f->list, "List every pass: name, stage, input kinds, summary");
  cmd->add_option("-o,--output", f->output, "Write the result to this file (default stdout)");
  add_config_flags(*cmd, f->config);
  cmd->callback([f, &action] { action = [f] { return run_opt(*f); }; });
}

}  // namespace qbc::cli
