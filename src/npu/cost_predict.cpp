// The cost model's answers built on estimate_call (see qbc/npu/cost_model.h): a mode's
// prediction for a prompt and the decode that follows, and the per-node cost table as text.
#include <algorithm>
#include <cstdio>
#include <string>

#include "qbc/npu/cost_model.h"

namespace qbc::npu {

StatusOr<ModePrediction> predict_mode(const isa::Bundle& b, const isa::Mode& mode,
                                      int64_t prompt_tokens, const CostParams& p,
                                      int active_instances) {
  if (prompt_tokens < 1 || prompt_tokens >= b.max_cache) {
    return invalid_argument("--prompt-tokens ", prompt_tokens, " must be in [1, ", b.max_cache - 1,
                            "] (the cache holds ", b.max_cache, " positions)");
  }
  ModePrediction r;
  r.scheme = mode.scheme;
  r.prompt_tokens = prompt_tokens;
  const int64_t chunk = std::max<int64_t>(1, mode.prefill.max_seq);
  double prefill_dram = 0, prefill_mac = 0, prefill_vec = 0, prefill_core = 0;
  for (int64_t s = 0; s < prompt_tokens; s += chunk) {
    CallSpec cs;
    cs.phase = isa::Phase::kPrefill;
    cs.start = s;
    cs.seq = std::min(chunk, prompt_tokens - s);
    cs.per_node = false;
    cs.active_instances = active_instances;
    QBC_ASSIGN_OR_RETURN(CallCost c, estimate_call(b, mode, cs, p));
    r.ttft_s += c.seconds;
    prefill_core += c.core_seconds;
    prefill_dram += c.dram_seconds;
    double mac = 0, vec = 0;
    for (const CostCounts& k : c.cores) {
      mac = std::max(mac, static_cast<double>(k.macs));
      vec = std::max(vec, static_cast<double>(k.vector_ops));
    }
    prefill_mac += mac / (std::max(p.int8_macs_per_cycle, 1e-9) * p.clock_hz * p.mac_efficiency);
    prefill_vec += vec / (std::max(p.vector_ops_per_cycle, 1e-9) * p.clock_hz);
  }
  r.prefill_bound = bound_of(prefill_dram, prefill_mac, prefill_vec, prefill_core);
  r.prefill_dram_s = prefill_dram;
  r.prefill_mac_s = prefill_mac;
  r.prefill_vector_s = prefill_vec;
  r.prefill_core_s = prefill_core;
  CallSpec d;
  d.phase = isa::Phase::kDecode;
  d.start = prompt_tokens;
  d.active_instances = active_instances;
  QBC_ASSIGN_OR_RETURN(r.decode, estimate_call(b, mode, d, p));
  r.decode_s = r.decode.seconds;
  r.bound = r.decode.bound;
  d.start = b.max_cache - 1;
  d.per_node = false;
  QBC_ASSIGN_OR_RETURN(CallCost end, estimate_call(b, mode, d, p));
  r.decode_end_s = end.seconds;
  // The unavoidable traffic of the step: every weight once, the visible KV read and this
  // position's KV written, at the effective bandwidth.
  double need =
      static_cast<double>(r.decode.total.dram_read[static_cast<int>(isa::Purpose::kWeights)]);
  for (const isa::AttnDesc& a : b.attentions) {
    const int64_t pos = prompt_tokens + 1;
    const int64_t visible = a.window > 0 ? std::min(a.window, pos) : pos;
    const int64_t row = a.key_record() + a.value_record();
    need += static_cast<double>(a.kv_heads * row * (visible + 1));
  }
  const double need_s =
      need * std::max(1, active_instances) / (p.dram_bytes_per_s * p.dram_efficiency);
  r.need_s = need_s;
  r.roofline_fraction = r.decode_s > 0 ? need_s / r.decode_s : 0.0;
  return r;
}

std::string cost_node_label(const isa::Bundle& b, int32_t node) {
  if (node >= 0 && static_cast<size_t>(node) < b.nodes.size())
    return b.nodes[static_cast<size_t>(node)];
  return "(token carriers, npu-deps)";
}

std::string cost_table_text(const isa::Bundle& b, const CallCost& c, size_t max_rows) {
  std::string out;
  char line[256];
  auto row = [&](const std::string& name, const CostCounts& k, double seconds, Bound bound) {
    std::snprintf(line, sizeof(line), "  %-34s %10.3f %10.3f %10.1f %8.1f  %s\n", name.c_str(),
                  static_cast<double>(k.dram_bytes()) / (1024.0 * 1024.0),
                  static_cast<double>(k.macs) / 1e6, static_cast<double>(k.vector_ops) / 1e3,
                  seconds * 1e6, bound_name(bound));
    out += line;
  };
  std::snprintf(line, sizeof(line), "  %-34s %10s %10s %10s %8s  %s\n", "node", "DRAM MiB", "MMACs",
                "kvec", "us", "bound");
  out += line;
  std::vector<const NodeCost*> rows;
  for (const NodeCost& n : c.nodes) rows.push_back(&n);
  if (max_rows > 0 && rows.size() > max_rows) {
    std::stable_sort(rows.begin(), rows.end(),
                     [](const NodeCost* x, const NodeCost* y) { return x->seconds > y->seconds; });
    rows.resize(max_rows);
  }
  for (const NodeCost* n : rows) row(cost_node_label(b, n->node), n->counts, n->seconds, n->bound);
  // The whole call: every core's counts, the slowest core's time, then the host's share.
  row("total", c.total, c.core_seconds, c.bound);
  std::snprintf(line, sizeof(line),
                "  (total: every core's counts and the slowest core's time; with %.1f us of host "
                "overhead the call takes %.1f us)\n",
                c.host_seconds * 1e6, c.seconds * 1e6);
  out += line;
  return out;
}

}  // namespace qbc::npu
