// `qbc plan` (see qbc/driver/plan.h).
#include "qbc/driver/plan.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "qbc/driver/backend.h"
#include "qbc/driver/mxq_output.h"
#include "qbc/frontend/hparams.h"
#include "qbc/frontend/importer.h"
#include "qbc/frontend/model_source.h"
#include "qbc/mxq/model_file.h"
#include "qbc/npu/compile.h"
#include "qbc/quant/shape_only.h"
#include "qbc/support/logging.h"

namespace qbc::driver {
namespace fs = std::filesystem;
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// Shapes only (no weight is read), unverified: the memory plan, or with the programs.
StatusOr<isa::Bundle> lower_shape(const ir::Graph& q, const npu::Options& o, bool programs) {
  return npu::run_pipeline(programs ? "npu-programs" : "npu-plan", q, o, nullptr);
}

}  // namespace

StatusOr<ir::Graph> shape_graph(const std::string& path, const config::ResolvedConfig& cfg) {
  std::error_code ec;
  frontend::HParams hp;
  if (ends_with(path, ".gguf")) {
    QBC_ASSIGN_OR_RETURN(frontend::ModelSource src, frontend::ModelSource::open(path));
    hp = src.hparams();
  } else {
    fs::path config = path;
    if (fs::is_directory(config, ec)) config /= "config.json";
    if (!fs::is_regular_file(config, ec))
      return not_found(path, ": no config.json (give a model folder, a config.json or a .gguf)");
    QBC_ASSIGN_OR_RETURN(hp, frontend::load_hparams(config));
  }
  frontend::ImportOptions opt;
  opt.max_cache_length = cfg.options.llm().attributes().max_cache_length();
  QBC_ASSIGN_OR_RETURN(ir::Graph g, frontend::build_decoder_graph(hp, opt));
  g.metadata["qbc.config"] = config::to_json(cfg.options);
  return g;
}

npu::CostParams cost_params(const config::TargetProfile& t) {
  npu::CostParams p;
  p.clock_hz = t.clock_mhz() * 1e6;
  p.int8_macs_per_cycle = static_cast<double>(t.int8_macs_per_cycle_per_core());
  p.int4_macs_per_cycle = static_cast<double>(t.int4_macs_per_cycle_per_core());
  p.int16_macs_per_cycle = static_cast<double>(t.int16_macs_per_cycle_per_core());
  p.vector_ops_per_cycle = static_cast<double>(t.vector_fp16_ops_per_cycle_per_core());
  p.dram_bytes_per_s = t.dram_bandwidth_gbps() * 1e9;
  p.dram_efficiency = t.dram_efficiency();
  p.mac_efficiency = t.mac_efficiency();
  p.dma_latency_s = t.dma_latency_ns() * 1e-9;
  p.issue_cycles = t.issue_cycles();
  p.barrier_s = t.barrier_ns() * 1e-9;
  p.host_s = t.host_overhead_us() * 1e-6;
  return p;
}

StatusOr<PlanResult> plan(const ir::Graph& shape, const config::ResolvedConfig& cfg,
                          const PlanOptions& options) {
  events::status("plan", "shape-only quantized graph of " + shape.name());
  QBC_ASSIGN_OR_RETURN(ir::Graph q, quant::shape_only(shape, cfg.options));
  QBC_ASSIGN_OR_RETURN(npu::Options base, backend_options(q, cfg));
  PlanResult r;
  r.target = base.target.name;
  // The configured deployment: its memory plan is what compile would check.
  events::status("plan", "memory plan for " + r.target);
  QBC_ASSIGN_OR_RETURN(r.bundle, lower_shape(q, base, true));
  r.memory = npu::memory_report(r.bundle);
  r.limits = npu::fit_limits(r.bundle, r.memory);
  r.fit = npu::check_fit(r.bundle, r.memory);
  r.max_cache = r.bundle.max_cache;
  r.batch = r.bundle.batch;
  r.chunk = r.bundle.chunk;
  // The largest context from the per-position term; below the configured one it is
  // confirmed by planning it (a graph is lowered for at most the cache it was built for).
  if (r.limits.max_cache > 0 && r.limits.max_cache < r.max_cache) {
    npu::Options at = base;
    for (int tries = 0; tries < 4 && r.limits.max_cache > 0; ++tries) {
      at.max_cache = r.limits.max_cache;
      at.chunk = std::min(base.chunk, at.max_cache);
      QBC_ASSIGN_OR_RETURN(isa::Bundle probe, lower_shape(q, at, false));
      const npu::MemoryReport m = npu::memory_report(probe);
      if (m.dram.total() <= m.device_bytes) break;
      const int64_t over = m.dram.total() - m.device_bytes;
      const int64_t per = std::max<int64_t>(1, m.kv_bytes_per_position * probe.batch);
      r.limits.max_cache -= std::max<int64_t>(1, (over + per - 1) / per);
    }
  }
  // Weights by MXQ part.
  QBC_ASSIGN_OR_RETURN(std::vector<int> split, split_boundaries(cfg, q));
  QBC_ASSIGN_OR_RETURN(auto ranges,
                       mxq::part_ranges(split, std::max(block_count(q), 1), "splitBlocks"));
  r.weights_by_part.assign(ranges.size(), 0);
  bool seen_block = false;
  for (const isa::Buffer& b : r.bundle.buffers) {
    if (b.space != isa::Space::kDram || b.purpose != isa::Purpose::kWeights) continue;
    seen_block = seen_block || b.block >= 0;
    r.weights_by_part[static_cast<size_t>(mxq::part_of_block(b.block, seen_block, ranges))] +=
        b.bytes;
  }
  if (!options.predictions) return r;

  std::vector<npu::ModeRequest> modes;
  const bool all =
      options.schemes.empty() && (config::is_default(cfg, "inferenceScheme") ||
                                  cfg.options.inference_scheme() == config::INFERENCE_SCHEME_ALL);
  const int cores = base.target.cores();
  auto want = [&](isa::Scheme s) {
    if (!options.schemes.empty())
      return std::find(options.schemes.begin(), options.schemes.end(), s) != options.schemes.end();
    if (all) return true;
    for (const npu::ModeRequest& m : base.modes)
      if (m.scheme == s) return true;
    return false;
  };
  if (want(isa::Scheme::kSingle)) modes.push_back({isa::Scheme::kSingle, 1, 1});
  if (cores >= 4 && want(isa::Scheme::kMulti)) modes.push_back({isa::Scheme::kMulti, 1, 4});
  if (cores >= 4 && want(isa::Scheme::kGlobal4)) modes.push_back({isa::Scheme::kGlobal4, 4, 1});
  if (cores >= 8 && want(isa::Scheme::kGlobal8)) modes.push_back({isa::Scheme::kGlobal8, 8, 1});
  const npu::CostParams cp = cost_params(cfg.options.target());
  // One compile and prediction per scheme, two at a time (independent; each lowers the
  // same shape graph).
  auto one = [&](const npu::ModeRequest& m) -> StatusOr<SchemePlan> {
    npu::Options o = base;
    o.modes = {m};
    o.batch = std::max<int64_t>(base.batch, m.instances);
    // The configured deployment's own programs when it is this one mode.
    const bool same = base.modes.size() == 1 && base.modes[0].scheme == m.scheme &&
                      base.modes[0].cores == m.cores && base.modes[0].instances == m.instances &&
                      base.batch == o.batch;
    isa::Bundle own;
    if (!same) {
      QBC_ASSIGN_OR_RETURN(own, lower_shape(q, o, true));
    }
    const isa::Bundle& b = same ? r.bundle : own;
    SchemePlan sp;
    sp.scheme = m.scheme;
    sp.cores = m.cores;
    sp.instances = m.instances;
    const int64_t prompt = std::min<int64_t>(options.prompt_tokens, b.max_cache - 1);
    QBC_ASSIGN_OR_RETURN(sp.prediction,
                         npu::predict_mode(b, b.modes.front(), prompt, cp, m.instances));
    return sp;
  };
  events::status("plan", "programs and cost of " + std::to_string(modes.size()) + " scheme(s)");
  std::vector<std::optional<StatusOr<SchemePlan>>> done(modes.size());
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < modes.size(); i = next++) done[i] = one(modes[i]);
  };
  {
    std::thread helper(worker);
    worker();
    helper.join();
  }
  for (auto& d : done) {
    if (!d->ok()) return d->status();
    r.schemes.push_back(std::move(d->value()));
  }
  return r;
}

std::string plan_json(const PlanResult& r) {
  nlohmann::ordered_json j;
  j["fits"] = r.limits.fits;
  j["target"] = r.target;
  j["max_cache_length"] = r.max_cache;
  j["batch_size"] = r.batch;
  j["memory"] = nlohmann::ordered_json::parse(npu::memory_json(r.memory));
  j["memory"]["weights_bytes_by_part"] = r.weights_by_part;
  j["max_context"] = r.limits.max_cache == INT64_MAX ? -1 : r.limits.max_cache;
  j["max_batch"] = r.limits.max_batch;
  j["schemes"] = nlohmann::ordered_json::array();
  for (const SchemePlan& s : r.schemes) {
    const npu::ModePrediction& p = s.prediction;
    nlohmann::ordered_json e;
    e["scheme"] = isa::scheme_name(s.scheme);
    e["cores"] = s.cores;
    e["instances"] = s.instances;
    e["prompt_tokens"] = p.prompt_tokens;
    e["ttft_ms"] = p.ttft_s * 1e3;
    e["decode_tok_s"] = p.decode_s > 0 ? 1.0 / p.decode_s : 0.0;
    e["decode_tok_s_at_end"] = p.decode_end_s > 0 ? 1.0 / p.decode_end_s : 0.0;
    e["roofline_fraction"] = p.roofline_fraction;
    e["bound"] = npu::bound_name(p.bound);
    e["prefill_bound"] = npu::bound_name(p.prefill_bound);
    e["decode_dram_bytes"] = p.decode.total.dram_bytes();
    e["decode_macs"] = p.decode.total.macs;
    j["schemes"].push_back(std::move(e));
  }
  return j.dump(2) + "\n";
}

std::string plan_text(const PlanResult& r) {
  std::ostringstream os;
  char line[256];
  os << "plan for target '" << r.target << "': " << r.batch << " sequence"
     << (r.batch == 1 ? "" : "s") << " of " << r.max_cache << " positions, prefill chunk "
     << r.chunk << "\n";
  os << "memory (DRAM)\n";
  if (r.weights_by_part.size() > 1) {
    for (size_t p = 0; p < r.weights_by_part.size(); ++p) {
      std::snprintf(line, sizeof(line), "  weights part %zu %14lld  %s\n", p,
                    static_cast<long long>(r.weights_by_part[p]),
                    npu::human_bytes(r.weights_by_part[p]).c_str());
      os << line;
    }
  }
  const isa::DramPlan& d = r.memory.dram;
  const std::pair<const char*, int64_t> rows[] = {{"weights", d.weights},
                                                  {"kv cache", d.kv},
                                                  {"activations", d.activations},
                                                  {"scratch", d.scratch},
                                                  {"io", d.io},
                                                  {"reserve", d.reserve},
                                                  {"total", d.total()},
                                                  {"device", r.memory.device_bytes}};
  for (const auto& [name, bytes] : rows) {
    std::snprintf(line, sizeof(line), "  %-14s %14lld  %s\n", name, static_cast<long long>(bytes),
                  npu::human_bytes(bytes).c_str());
    os << line;
  }
  int64_t peak = 0;
  for (int64_t p : r.memory.sram_peak) peak = std::max(peak, p);
  std::snprintf(line, sizeof(line), "  SRAM peak %s of %s per core; program %s\n",
                npu::human_bytes(peak).c_str(), npu::human_bytes(r.memory.sram_bytes).c_str(),
                npu::human_bytes(r.memory.program_bytes).c_str());
  os << line;
  os << (r.limits.fits ? "fits" : "DOES NOT FIT") << ": " << npu::human_bytes(d.total()) << " of "
     << npu::human_bytes(r.memory.device_bytes);
  if (r.limits.max_cache == INT64_MAX) {
    os << "; the KV cache does not grow with the context (sliding windows only)";
  } else {
    os << "; largest maxCacheLength that fits " << r.limits.max_cache;
  }
  os << "; largest batchSize " << r.limits.max_batch << "\n";
  if (!r.schemes.empty()) {
    std::snprintf(line, sizeof(line), "%-8s %5s %10s %12s %12s %9s  %s\n", "scheme", "cores",
                  "TTFT ms", "decode tok/s", "at end tok/s", "roofline", "bound");
    os << line;
    for (const SchemePlan& s : r.schemes) {
      const npu::ModePrediction& p = s.prediction;
      std::snprintf(line, sizeof(line), "%-8s %5d %10.1f %12.2f %12.2f %8.1f%%  %s (prefill %s)\n",
                    isa::scheme_name(s.scheme), s.cores * s.instances, p.ttft_s * 1e3,
                    p.decode_s > 0 ? 1.0 / p.decode_s : 0.0,
                    p.decode_end_s > 0 ? 1.0 / p.decode_end_s : 0.0, 100.0 * p.roofline_fraction,
                    npu::bound_name(p.bound), npu::bound_name(p.prefill_bound));
      os << line;
    }
    os << "TTFT for " << r.schemes.front().prediction.prompt_tokens
       << " prompt tokens; decode right after the prompt and with the cache full; multi: per "
          "sequence with 4 running; roofline: unavoidable DRAM bytes (weights, KV read and "
          "written) at the effective bandwidth over the step time\n";
  }
  return os.str();
}

}  // namespace qbc::driver
