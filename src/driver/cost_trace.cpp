// The cost model's timeline of a compiled MXQ (see qbc/driver/cost_trace.h).
#include "qbc/driver/cost_trace.h"

#include <cstdio>

#include "qbc/driver/plan.h"
#include "qbc/driver/stored_config.h"
#include "qbc/report/trace.h"

namespace qbc::driver {

StatusOr<CostTrace> cost_trace(const std::string& path, const mxq::LoadedModel& m) {
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, stored_config(path, m));
  const isa::Bundle& b = *m.bundle;
  if (b.modes.empty()) return invalid_argument(path, ": the file holds no program");
  const isa::Mode& mode = b.modes.front();
  QBC_ASSIGN_OR_RETURN(std::vector<report::TraceCall> calls,
                       report::trace_calls(b, mode, cost_params(cfg.options.target())));
  CostTrace t;
  t.json = report::chrome_trace_json(b, mode, calls);
  t.scheme = isa::scheme_name(mode.scheme);
  t.cores = mode.cores_per_instance;
  for (const report::TraceCall& c : calls) {
    t.spans += c.cost.spans.size();
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%s%s %.1f us", t.figures.empty() ? "" : ", ", c.name.c_str(),
                  c.cost.seconds * 1e6);
    t.figures += buf;
  }
  return t;
}

}  // namespace qbc::driver
