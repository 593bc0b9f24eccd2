// The ARIES backend: lowers a quantized MBLT graph to an isa::Bundle (docs/npu.md): the DRAM
// image of pre-tiled weights, the memory plan, and per inference scheme a prefill and a
// decode program for every cooperating core. Tile sizes follow the target's SRAM budget and
// never the context length; the context only changes DRAM sizes and loop trip counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qbc/ir/graph.h"
#include "qbc/ir/weight_reader.h"
#include "qbc/isa/program.h"
#include "qbc/support/status.h"

namespace qbc::npu {

/// The numbers of the target profile the backend uses (configs/targets/*.yaml).
struct Target {
  std::string name;
  int32_t clusters = 1, cores_per_cluster = 1;
  int64_t sram_bytes = 0, dram_bytes = 0;
  int64_t dma_align = 16;    ///< DMA address and stride alignment on the DRAM side
  int64_t dram_reserve = 0;  ///< DRAM kept free for the runtime and firmware
  int32_t cores() const { return clusters * cores_per_cluster; }
};

/// A mode to compile: a scheme name and the cores cooperating on one sequence.
struct ModeRequest {
  isa::Scheme scheme = isa::Scheme::kSingle;
  int32_t cores = 1;      ///< cooperating cores per instance
  int32_t instances = 1;  ///< independent sequences the mode serves at once
};

struct Options {
  Target target;
  std::vector<ModeRequest> modes;  ///< at least one
  int64_t max_cache = 4096;        ///< KV capacity per sequence (llm.attributes.maxCacheLength)
  int64_t chunk = 128;             ///< prefill tokens per call (llm.attributes.maxCoreDataLength)
  int64_t batch = 1;               ///< sequences with their own KV region (runtime.batchSize)
  /// When false only shapes are planned: no weight is read and the image stays empty (plans
  /// and the context-independence check).
  bool with_weights = true;
  /// Stop after the memory plan (no programs): the DRAM plan and the fit check only, as a
  /// plan needs them.
  bool plan_only = false;
  /// When false a plan that does not fit the device is still returned (qbc plan reports
  /// it with npu::fit_limits); compile refuses it otherwise (kResourceExhausted).
  bool fit_check = true;
  /// Runs the program verifier after every pass and the context-independence check (V9).
  /// qbc plan turns both off: they check what compile emits, they do not change it, and
  /// compile runs them on the same programs.
  bool verify = true;
  /// Internal: a second compile at another cache length for the context-independence
  /// check (no fit check, any cache length).
  bool probe = false;
};

/// The backend passes in order (docs/npu.md): plan-tiles, plan-memory, fill-weights,
/// lower (streams and dependency tokens), check-context (V9). The program verifier runs
/// after every pass once programs exist.
std::vector<std::string> backend_passes();

/// Compiles `graph` (quantized: every linear a qlinear, every attention with a quantized KV
/// cache). Errors name the node at fault; kResourceExhausted when a tile cannot fit SRAM.
/// `codes`, when given, serves the int8-stored weight codes without a float round trip
/// (the bundle is the same either way).
StatusOr<isa::Bundle> compile(const ir::Graph& graph, const ir::WeightReader& weights,
                              const Options& options, const ir::Int8View& codes = {});

}  // namespace qbc::npu
