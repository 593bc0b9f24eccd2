// Shared pieces of the qbc command line: the command table and the config
// flags every compile-side command accepts.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "qbc/driver/compile.h"
#include "qbc/driver/config_request.h"
#include "qbc/driver/model_context.h"
#include "qbc/driver/stored_config.h"
#include "qbc/support/status.h"

namespace qbc::cli {

/// The action of the selected subcommand, set by its CLI11 callback.
using Action = std::function<Status()>;

/// Config flags shared by commands that resolve a configuration: the driver's request.
using ConfigFlags = driver::ConfigRequest;

/// Adds --preset, -c/--config, --set and the explicit config flags to `cmd`.
void add_config_flags(CLI::App& cmd, ConfigFlags& flags);
/// Adds --context and --batch (commands that compile or plan a deployment).
void add_context_flags(CLI::App& cmd, ConfigFlags& flags);

/// Resolves the configuration the flags describe (defaults < target < preset <
/// files < --set < flags) and logs its notes.
StatusOr<config::ResolvedConfig> resolve_config(const ConfigFlags& flags);

/// resolve_config for the model at `model` (folder, config.json, .gguf or .mblt): the
/// sequence and cache lengths a preset or the defaults give are lowered to the length the
/// model was trained for (driver::fit_lengths_to_model), read from its config.json or
/// metadata before any heavy work. `trained`, when given, receives that length.
StatusOr<config::ResolvedConfig> resolve_for_model(const ConfigFlags& flags,
                                                   const std::string& model,
                                                   driver::TrainedContext* trained = nullptr);

/// The configuration `run` and `eval` use for `model`: for a compiled .mxq the flags are
/// checked against the file (check_flags_for_mxq), otherwise resolve_for_model.
StatusOr<config::ResolvedConfig> resolve_for_input(const ConfigFlags& flags,
                                                   const std::string& model);

/// Refuses (exit 2, naming both) --target-device / --target-profile values other than the
/// target `m` (loaded from `path`) was compiled for.
Status check_mxq_target(const std::string& path, const mxq::LoadedModel& m, const ConfigFlags& f);
/// Config flags given with the compiled MXQ at `path`: a target other than the file's is
/// refused (check_mxq_target), and so are --inference-scheme, --calib and
/// --use-random-calib, which only a compile uses.
Status check_flags_for_mxq(const std::string& path, const ConfigFlags& f);

/// Writes `text` to `path` (atomically) or, when `path` is empty, to stdout.
Status emit_output(const std::string& path, const std::string& text);

/// Command registration; each sets `action` when its subcommand is selected.
void register_dump_config(CLI::App& app, Action& action);
void register_presets(CLI::App& app, Action& action);
void register_targets(CLI::App& app, Action& action);
void register_parse(CLI::App& app, Action& action);
void register_inspect(CLI::App& app, Action& action);
void register_run(CLI::App& app, Action& action);
void register_eval(CLI::App& app, Action& action);
void register_quantize(CLI::App& app, Action& action);
void register_random_model(CLI::App& app, Action& action);
void register_calib(CLI::App& app, Action& action);
void register_verify(CLI::App& app, Action& action);
void register_plan(CLI::App& app, Action& action);
void register_report(CLI::App& app, Action& action);
void register_opt(CLI::App& app, Action& action);

/// `qbc inspect MODEL.mxq` (cmd_mxq.cpp): the file summary, or the memory plan / programs
/// of the bundle inside it.
Status inspect_mxq(const std::string& path, bool json, bool memory, bool program, bool no_verify,
                   bool cost = false, int64_t prompt_tokens = 240, const std::string& trace = "");

/// `qbc report` / `compile --report` (cmd_report.cpp): the HTML report of the MXQ at
/// `mxq_path` to `output` (driver::write_report). `compiled` (the configuration with origins)
/// and the compile's `steps` are known when a compile writes it; `accuracy` is an optional
/// `qbc eval --json` file.
Status write_report(const std::string& mxq_path, const std::string& output,
                    const std::string& accuracy, const config::ResolvedConfig* compiled,
                    const std::vector<driver::TimedStep>& steps, int64_t prompt_tokens = 240);
/// `inspect --trace`: the cost model's timeline of the file's first mode as a Chrome trace.
Status write_trace(const std::string& mxq_path, const mxq::LoadedModel& m,
                   const std::string& output);
/// `qbc dump-config MODEL.mxq`: the configuration the file was compiled with, as YAML or JSON.
Status dump_config_mxq(const std::string& path, const std::string& format,
                       const std::string& output);

}  // namespace qbc::cli
