// The HTML report of a compiled MXQ (see qbc/driver/report.h).
#include "qbc/driver/report.h"

#include "qbc/driver/plan.h"
#include "qbc/driver/stored_config.h"
#include "qbc/mxq/model_file.h"
#include "qbc/report/report.h"
#include "qbc/support/file_util.h"

namespace qbc::driver {
namespace {

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

}  // namespace

StatusOr<size_t> write_report(const ReportRequest& r) {
  QBC_ASSIGN_OR_RETURN(mxq::LoadedModel m, mxq::load_model(r.mxq_path));
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig stored, stored_config(r.mxq_path, m));
  report::ReportInput in;
  in.model_file = r.mxq_path;
  in.model_name = m.meta.model_name();
  in.producer = m.meta.producer() + " " + m.meta.producer_version();
  in.bundle = m.bundle.get();
  in.cost = cost_params(stored.options.target());
  in.prompt_tokens = r.prompt_tokens;
  if (r.compiled != nullptr) {
    in.config = config::origin_rows(r.compiled->options, r.compiled->origins);
  } else {
    in.config = stored_origin_rows(stored.options);
    in.config_note =
        "Values as stored in the MXQ. The file keeps values, not origins: `qbc compile ... "
        "--report` records the file, line, preset or flag each value came from.";
  }
  for (const TimedStep& s : r.steps) in.passes.push_back({s.stage, s.name, s.seconds});
  if (in.passes.empty())
    in.passes_note =
        "Not recorded: pass times are known during a compile (`qbc compile ... "
        "--report`), the MXQ does not keep them.";
  if (!r.accuracy.empty()) {
    QBC_ASSIGN_OR_RETURN(std::string text, read_text_file(r.accuracy));
    QBC_ASSIGN_OR_RETURN(in.accuracy, report::parse_accuracy_json(text, r.accuracy));
  }
  QBC_ASSIGN_OR_RETURN(std::string html, report::render_html(in));
  QBC_RETURN_IF_ERROR(write_file_atomic(r.output, html));
  return html.size();
}

}  // namespace qbc::driver
