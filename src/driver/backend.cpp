// The backend step of the driver (see qbc/driver/backend.h).
#include "qbc/driver/backend.h"

#include <algorithm>

#include "qbc/config/target.h"
#include "qbc/driver/generate.h"

namespace qbc::driver {
namespace {

bool is_default(const config::ResolvedConfig& c, const std::string& key) {
  auto it = c.origins.find(key);
  return it == c.origins.end() || it->second.source == "default";
}

}  // namespace

StatusOr<npu::Options> backend_options(const ir::Graph& graph, const config::ResolvedConfig& cfg) {
  const config::CompileOptions& co = cfg.options;
  const config::TargetProfile& tp = co.target();
  npu::Options o;
  o.target.name = tp.name();
  o.target.clusters = tp.clusters();
  o.target.cores_per_cluster = tp.cores_per_cluster();
  o.target.sram_bytes = tp.sram_bytes_per_core();
  o.target.dram_bytes = tp.dram_bytes();
  o.target.dma_align = tp.dma_align_bytes();
  o.target.dram_reserve = tp.dram_reserve_bytes();
  if (o.target.dma_align <= 0 || (o.target.dma_align & (o.target.dma_align - 1)) != 0) {
    return invalid_argument("target.dmaAlignBytes ", o.target.dma_align,
                            " is not a power of two (target '", tp.name(), "')");
  }
  const config::LlmAttributes& a = co.llm().attributes();
  o.batch = std::max(1, a.runtime().batch_size());
  o.chunk = a.max_core_data_length();
  o.max_cache = is_default(cfg, "llm.attributes.maxCacheLength") ? cache_capacity(graph)
                                                                 : a.max_cache_length();
  if (o.max_cache <= 0) return invalid_argument("graph '", graph.name(), "' has no KV cache");
  o.chunk = std::min(o.chunk, o.max_cache);
  const int cores = o.target.cores();
  auto add = [&](isa::Scheme s, int32_t per, int32_t instances) {
    o.modes.push_back(npu::ModeRequest{s, per, instances});
  };
  switch (co.inference_scheme()) {
    case config::INFERENCE_SCHEME_MULTI:
      add(isa::Scheme::kMulti, 1, 4);
      break;
    case config::INFERENCE_SCHEME_GLOBAL4:
      add(isa::Scheme::kGlobal4, 4, 1);
      break;
    case config::INFERENCE_SCHEME_GLOBAL8:
      add(isa::Scheme::kGlobal8, 8, 1);
      break;
    case config::INFERENCE_SCHEME_ALL:
      add(isa::Scheme::kSingle, 1, static_cast<int32_t>(o.batch));
      if (cores >= 4) add(isa::Scheme::kMulti, 1, 4);
      if (cores >= 4) add(isa::Scheme::kGlobal4, 4, 1);
      if (cores >= 8) add(isa::Scheme::kGlobal8, 8, 1);
      break;
    default:
      add(isa::Scheme::kSingle, 1, static_cast<int32_t>(o.batch));
      break;
  }
  for (const npu::ModeRequest& m : o.modes) o.batch = std::max<int64_t>(o.batch, m.instances);
  return o;
}

StatusOr<isa::Bundle> compile_backend(const LoadedModel& model, const npu::Options& options) {
  const LoadedModel* m = &model;
  return npu::compile(
      model.graph,
      [m](const ir::Weight& w, std::vector<float>* out) { return read_weight(*m, w, out); },
      options);
}

}  // namespace qbc::driver
