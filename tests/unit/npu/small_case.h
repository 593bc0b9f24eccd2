// The backend tests' small case: SmolLM2-135M's shape with two decoder layers, quantized
// shape-only, with the backend options for the test-2core target (shared asset
// model-configs/SmolLM2-135M-Instruct; callers skip or fail through QBC_REQUIRE_SHARED).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

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

/// A shared model config (`rel` under ../shared/model-configs) as a shape-only quantized
/// graph: `layers` decoder layers (0: all), cache `ctx`, the llm_fast preset plus `sets`.
struct Shaped {
  ir::Graph graph;
  config::CompileOptions options;
};
inline StatusOr<Shaped> shaped_config(const std::string& rel, int layers, int64_t ctx,
                                      std::vector<std::string> sets = {}) {
  const std::filesystem::path path = shared_dir() / "model-configs" / rel / "config.json";
  std::string text = read_file(path);
  if (layers > 0) {
    frontend::ConfigOverrides ov;
    ov.num_hidden_layers = layers;
    QBC_ASSIGN_OR_RETURN(text,
                         frontend::apply_config_overrides(text, path.string(), ov, std::nullopt));
  }
  QBC_ASSIGN_OR_RETURN(frontend::HParams hp, frontend::parse_hparams(text, path.string()));
  frontend::ImportOptions io;
  io.max_cache_length = ctx;
  QBC_ASSIGN_OR_RETURN(ir::Graph g, frontend::build_decoder_graph(hp, io));
  config::LoadRequest req;
  req.preset = "llm_fast";
  req.sets = std::move(sets);
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, config::resolve(req));
  Shaped s;
  QBC_ASSIGN_OR_RETURN(s.graph, quant::shape_only(g, cfg.options));
  s.options = cfg.options;
  return s;
}

/// The backend target of the target profile `name` ("aries-rb", "test-2core").
inline StatusOr<npu::Target> test_target(const std::string& name) {
  QBC_ASSIGN_OR_RETURN(config::TargetFile f, config::load_target(name));
  npu::Target t;
  t.name = f.profile.name();
  t.clusters = f.profile.clusters();
  t.cores_per_cluster = f.profile.cores_per_cluster();
  t.sram_bytes = f.profile.sram_bytes_per_core();
  t.dram_bytes = f.profile.dram_bytes();
  t.dma_align = f.profile.dma_align_bytes();
  t.dram_reserve = f.profile.dram_reserve_bytes();
  return t;
}

/// SmolLM2-135M's shape with two decoder layers, quantized shape-only
/// (llm_fast) for a cache of `cache` positions, and the backend options for the test-2core
/// target at that cache.
struct Case {
  ir::Graph graph;
  npu::Options options;
};

inline StatusOr<Case> small_case(int64_t cache = 512) {
  QBC_ASSIGN_OR_RETURN(Shaped shaped, shaped_config("SmolLM2-135M-Instruct", 2, cache));
  Case c;
  c.graph = std::move(shaped.graph);
  QBC_ASSIGN_OR_RETURN(c.options.target, test_target("test-2core"));
  c.options.modes = {{isa::Scheme::kSingle, 1, 1}, {isa::Scheme::kGlobal4, 2, 1}};
  c.options.max_cache = cache;
  c.options.chunk = 64;
  return c;
}

}  // namespace qbc::testing
