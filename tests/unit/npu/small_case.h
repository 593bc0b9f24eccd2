// The backend tests' small case: SmolLM2-135M's shape with two decoder layers, quantized
// shape-only, with the backend options for the test-2core target (shared asset
// model-configs/SmolLM2-135M-Instruct; callers skip or fail through QBC_REQUIRE_SHARED).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "qbc/config/config.h"
#include "qbc/config/target.h"
#include "qbc/frontend/hparams.h"
#include "qbc/frontend/importer.h"
#include "qbc/frontend/random_model.h"
#include "qbc/ir/graph.h"
#include "qbc/npu/compile.h"
#include "qbc/quant/shape_only.h"
#include "test_support.h"

namespace qbc::testing {

/// SmolLM2-135M's shape with two decoder layers, quantized shape-only
/// (llm_fast) for a cache of `cache` positions, and the backend options for the test-2core
/// target at that cache.
struct Case {
  ir::Graph graph;
  npu::Options options;
};

inline StatusOr<Case> small_case(int64_t cache = 512) {
  const std::filesystem::path path =
      testing::shared_dir() / "model-configs/SmolLM2-135M-Instruct/config.json";
  std::string text = testing::read_file(path);
  frontend::ConfigOverrides ov;
  ov.num_hidden_layers = 2;
  QBC_ASSIGN_OR_RETURN(text,
                       frontend::apply_config_overrides(text, path.string(), ov, std::nullopt));
  QBC_ASSIGN_OR_RETURN(frontend::HParams hp, frontend::parse_hparams(text, path.string()));
  frontend::ImportOptions io;
  io.max_cache_length = cache;
  QBC_ASSIGN_OR_RETURN(ir::Graph g, frontend::build_decoder_graph(hp, io));
  config::LoadRequest req;
  req.preset = "llm_fast";
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, config::resolve(req));
  Case c;
  QBC_ASSIGN_OR_RETURN(c.graph, quant::shape_only(g, cfg.options));
  QBC_ASSIGN_OR_RETURN(config::TargetFile f, config::load_target("test-2core"));
  npu::Target& t = c.options.target;
  t.name = f.profile.name();
  t.clusters = f.profile.clusters();
  t.cores_per_cluster = f.profile.cores_per_cluster();
  t.sram_bytes = f.profile.sram_bytes_per_core();
  t.dram_bytes = f.profile.dram_bytes();
  t.dma_align = f.profile.dma_align_bytes();
  t.dram_reserve = f.profile.dram_reserve_bytes();
  c.options.modes = {{isa::Scheme::kSingle, 1, 1}, {isa::Scheme::kGlobal4, 2, 1}};
  c.options.max_cache = cache;
  c.options.chunk = 64;
  return c;
}

}  // namespace qbc::testing
