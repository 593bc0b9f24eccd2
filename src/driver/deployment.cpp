// The configuration translated for the stages (see qbc/driver/deployment.h).
#include "qbc/driver/deployment.h"

namespace qbc::driver {

frontend::ImportOptions import_options(const config::ResolvedConfig& cfg) {
  frontend::ImportOptions o;
  o.max_cache_length = cfg.options.llm().attributes().max_cache_length();
  return o;
}

StatusOr<npu::Target> npu_target(const config::TargetProfile& tp) {
  npu::Target t;
  t.name = tp.name();
  t.clusters = tp.clusters();
  t.cores_per_cluster = tp.cores_per_cluster();
  t.sram_bytes = tp.sram_bytes_per_core();
  t.dram_bytes = tp.dram_bytes();
  t.dma_align = tp.dma_align_bytes();
  t.dram_reserve = tp.dram_reserve_bytes();
  if (t.dma_align <= 0 || (t.dma_align & (t.dma_align - 1)) != 0) {
    return invalid_argument("target.dmaAlignBytes ", t.dma_align,
                            " is not a power of two (target '", tp.name(), "')");
  }
  return t;
}

}  // namespace qbc::driver
