// `qbc inspect MODEL.mxq --cost` (see compiled_cost.h).
#include "compiled_cost.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "qbc/driver/plan.h"
#include "qbc/driver/stored_config.h"
#include "qbc/npu/cost_model.h"

namespace qbc::driver {

StatusOr<Inspection> compiled_cost(const std::string& path, const mxq::LoadedModel& m, bool json,
                                   int64_t prompt_tokens) {
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, stored_config(path, m));
  const npu::CostParams p = cost_params(cfg.options.target());
  const isa::Bundle& b = *m.bundle;
  const int64_t prompt = std::max<int64_t>(1, std::min<int64_t>(prompt_tokens, b.max_cache - 1));
  nlohmann::ordered_json j;
  j["target"] = b.target;
  j["prompt_tokens"] = prompt;
  j["schemes"] = nlohmann::ordered_json::array();
  std::ostringstream os;
  os << "cost model of " << path << " on target '" << b.target << "' (" << prompt
     << " prompt tokens; profile of the stored configuration)\n";
  for (const isa::Mode& mode : b.modes) {
    QBC_ASSIGN_OR_RETURN(npu::ModePrediction r,
                         npu::predict_mode(b, mode, prompt, p, mode.instances));
    nlohmann::ordered_json e;
    e["scheme"] = isa::scheme_name(mode.scheme);
    e["ttft_ms"] = r.ttft_s * 1e3;
    e["decode_tok_s"] = r.decode_s > 0 ? 1.0 / r.decode_s : 0.0;
    e["decode_tok_s_at_end"] = r.decode_end_s > 0 ? 1.0 / r.decode_end_s : 0.0;
    e["roofline_fraction"] = r.roofline_fraction;
    e["bound"] = npu::bound_name(r.bound);
    e["layers"] = nlohmann::ordered_json::array();
    for (const npu::NodeCost& n : r.decode.nodes) {
      nlohmann::ordered_json l;
      l["node"] = npu::cost_node_label(b, n.node);
      l["dram_bytes"] = n.counts.dram_bytes();
      l["macs"] = n.counts.macs;
      l["vector_ops"] = n.counts.vector_ops;
      l["bound"] = npu::bound_name(n.bound);
      l["us"] = n.seconds * 1e6;
      e["layers"].push_back(std::move(l));
    }
    e["decode_total"] = {
        {"dram_bytes", r.decode.total.dram_bytes()}, {"macs", r.decode.total.macs},
        {"vector_ops", r.decode.total.vector_ops},   {"core_us", r.decode.core_seconds * 1e6},
        {"host_us", r.decode.host_seconds * 1e6},    {"us", r.decode.seconds * 1e6}};
    j["schemes"].push_back(std::move(e));
    char line[256];
    std::snprintf(line, sizeof(line),
                  "%s: TTFT %.1f ms, decode %.2f tok/s (%.2f with the cache full), %.1f %% of the "
                  "DRAM roofline, %s-bound; decode step by node:\n",
                  isa::scheme_name(mode.scheme), r.ttft_s * 1e3,
                  r.decode_s > 0 ? 1.0 / r.decode_s : 0.0,
                  r.decode_end_s > 0 ? 1.0 / r.decode_end_s : 0.0, 100.0 * r.roofline_fraction,
                  npu::bound_name(r.bound));
    os << line << npu::cost_table_text(b, r.decode);
  }
  Inspection out;
  out.event = "inspect-cost";
  out.event_json = j.dump();
  out.text = json ? j.dump(2) + "\n" : os.str();
  return out;
}

}  // namespace qbc::driver
