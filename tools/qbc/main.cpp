// qbc: compiles HuggingFace decoder LLMs into quantized programs for the ARIES NPU.
#include <google/protobuf/stubs/common.h>
#include <spdlog/version.h>

#include <CLI/CLI.hpp>
#include <exception>

#include "cli.h"
#include "qbc/driver/startup.h"
#include "qbc/support/cancel.h"
#include "qbc/support/exit_codes.h"
#include "qbc/support/host_memory.h"
#include "qbc/support/logging.h"
#include "qbc/support/progress.h"
#include "qbc/support/quote.h"
#include "qbc/support/utf8.h"
#include "qbc_git_describe.h"

namespace {

std::string version_text() {
  std::string s = "qbc " QBC_VERSION " (" QBC_GIT_DESCRIBE ")\n";
  s += "build: " QBC_BUILD_TYPE ", " QBC_COMPILER ", C++17\n";
  s += "libraries: protobuf " + google::protobuf::internal::VersionString(GOOGLE_PROTOBUF_VERSION) +
       ", spdlog " + std::to_string(SPDLOG_VER_MAJOR) + "." + std::to_string(SPDLOG_VER_MINOR) +
       "." + std::to_string(SPDLOG_VER_PATCH) + ", CLI11 " CLI11_VERSION;
  return s;
}

const char* kFooter =
    "Exit codes: 0 ok, 2 bad usage/config/input, 3 unsupported model or feature,\n"
    "            4 does not fit the target, 70 internal error, 130 interrupted (Ctrl-C;\n"
    "            143 for SIGTERM): quantize, compile and calib prepare stop at the next\n"
    "            safe point and remove their temporary files and partial outputs.\n"
    "Docs: docs/cli.md (commands), docs/config.md (every config key).";

// The command line is read like any input: paths, prompts and values reach JSON writers (events,
// results, the embedded configuration), so an argument that is not UTF-8 is refused here, exit 2.
qbc::Status check_arguments_utf8(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string what =
        "command-line argument " + std::to_string(i) + " " + qbc::quote_prefix(argv[i]);
    QBC_RETURN_IF_ERROR(qbc::check_utf8_value(argv[i], what));
  }
  return qbc::ok_status();
}

int run(int argc, char** argv) {
  // libprotobuf's own log lines (a junk MBLT's invalid UTF-8) go to the debug log, not next to
  // the located error we print.
  qbc::driver::startup();
  CLI::App app("qbc: compiles HuggingFace decoder LLMs into quantized programs for the ARIES NPU");
  app.footer(kFooter);
  app.set_version_flag("--version", version_text(), "Print version and build information");
  app.require_subcommand(1);
  int verbose = 0;
  bool quiet = false;
  std::string log_format = "text";
  double progress_interval = 30.0;
  app.add_flag("-v,--verbose", verbose, "More logging: -v info (one line per stage), -vv debug");
  app.add_flag("-q,--quiet", quiet, "Errors only");
  app.add_option("--log-format", log_format,
                 "stderr format: text, or json (one JSON event per line: status, progress, result, "
                 "log, error)")
      ->check(CLI::IsMember({"text", "json"}));
  app.add_option("--progress-interval", progress_interval,
                 "Seconds between heartbeat progress lines when stderr is not a terminal (a log "
                 "file, a pipe, CI): stage, n/N, rate, elapsed, time left; with --log-format json "
                 "progress events marked heartbeat. 0 turns them off")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.fallthrough();

  qbc::cli::Action action;
  qbc::cli::register_parse(app, action);
  qbc::cli::register_inspect(app, action);
  qbc::cli::register_run(app, action);
  qbc::cli::register_eval(app, action);
  qbc::cli::register_calib(app, action);
  qbc::cli::register_quantize(app, action);
  qbc::cli::register_dump_config(app, action);
  qbc::cli::register_presets(app, action);
  qbc::cli::register_targets(app, action);
  qbc::cli::register_random_model(app, action);
  qbc::cli::register_verify(app, action);
  qbc::cli::register_plan(app, action);
  qbc::cli::register_report(app, action);
  qbc::cli::register_opt(app, action);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? qbc::kExitOk : qbc::kExitBadInput;
  }
  qbc::init_logging(verbose, quiet,
                    log_format == "json" ? qbc::LogFormat::kJson : qbc::LogFormat::kText);
  qbc::progress::set_heartbeat_interval(progress_interval);
  if (!action) return qbc::kExitBadInput;
  qbc::Status st = check_arguments_utf8(argc, argv);
  if (st.ok()) st = action();
  if (st.ok()) return qbc::kExitOk;
  // Any failure after Ctrl-C / SIGTERM is the interruption (a step cut short by it may
  // report its own error): events::error prints "interrupted".
  const int rc = qbc::cancel::requested() ? qbc::cancel::exit_code() : qbc::exit_code_for(st);
  qbc::events::error(st, rc);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  // Keeps compile-sized blocks on the heap (support/host_memory.h says why and how much).
  qbc::host_memory::tune_host_allocator();
  // Stage APIs return Status; anything thrown past them is a bug, reported as such.
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "qbc: internal error: uncaught exception: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "qbc: internal error: uncaught exception\n");
  }
  return qbc::kExitInternal;
}
