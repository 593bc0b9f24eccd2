// Internal to the backend: the context its passes share (docs/npu.md "Passes"). It holds
// the graph being compiled, the options, the decisions the passes have made so far (the
// plan: each node's tiles and parameters, each value's DRAM place, the regions) and the
// bundle they build. Each pass reads what an earlier pass provided (the resource bits) and
// writes its own part; nothing else is shared between passes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "lowering.h"
#include "qbc/ir/graph.h"
#include "qbc/ir/weight_reader.h"
#include "qbc/isa/program.h"
#include "qbc/npu/compile.h"
#include "qbc/pass/pass.h"

namespace qbc::npu {

/// A qlinear's decoded attributes and its place in the weight image.
struct LinearInfo {
  int64_t n = 0, k = 0, group = 0, groups = 1;  // groups: scale columns per channel
  int w_bits = 8, in_bits = 8;
  bool zero = false, bias = false, out_fp16 = true;
  isa::QuantMode mode = isa::QuantMode::kTokenAffine;
  float in_scale = 1.0f;
  int32_t in_zero = 0;
  LinearTiles t;
  int64_t ntiles = 0, ktiles = 0, gt = 1;  // gt: groups per k tile (grouped) or 1
  int32_t buf = -1;                        // DRAM weights buffer
  // Offsets inside buf (bytes): w block per (n tile, k tile), scales and zero points per
  // (n tile, k tile) when grouped else per n tile, bias per n tile.
  std::vector<int64_t> w_off, ws_off, wz_off, b_off;
  int64_t w_bytes = 0;  // bytes of one full w tile
};

/// An attention's descriptor, parameter block, KV buffers and tiles.
struct AttnInfo {
  int32_t desc = -1;    // Bundle::attentions
  int32_t params = -1;  // DRAM buffer of the fp32 parameter block
  int64_t params_bytes = 0;
  int32_t kcache = -1, vcache = -1;  // DRAM KV buffers (per slot)
  int64_t krow = 0, vrow = 0;        // bytes per cached row of one head (aligned)
  AttnTiles t;
  int64_t append_mt = 1;
};

/// The decisions of the planning passes, by MBLT node id.
struct PlanState {
  std::map<int, LinearInfo> lin;       // plan-tiles (tiles), plan-memory (image offsets)
  std::map<int, AttnInfo> attn;        // plan-tiles (tiles), plan-memory (parameters, KV)
  std::map<int, int32_t> norm_weight;  // plan-memory: RMSNorm weight buffer (fp32 [width])
  std::map<int, int32_t> rope_desc;    // plan-tiles: Bundle::ropes index
  std::vector<ValueLoc> loc;           // plan-memory: every value's DRAM place
  int embeds = -1, positions = -1, output = -1;  // plan-tiles: the graph's inputs and output
  int64_t budget = 0;                            // SRAM bytes per core
  int64_t weights_top = 0, slot_top = 0;         // running DRAM offsets
  std::vector<int32_t> slot_buffers;             // buffers placed in the per-slot region
  int32_t scratch = -1;                          // attention merge scratch (DRAM)
};

/// The backend's unit for the pass manager.
class Context {
 public:
  static constexpr const char* kStage = "npu";
  static constexpr const char* kDumpExtension = "npu.txt";
  enum : pass::ResourceSet {
    kTiles = 1,     // plan-tiles: tiles, descriptors, the bundle header
    kMemory = 2,    // plan-memory: DRAM places and regions
    kImage = 4,     // fill-weights: the weight image (or its shape)
    kPrograms = 8,  // lower: every mode's programs, without tokens
    kTokens = 16,   // assign-tokens: the programs' dependency tokens
  };

  /// `weights` null: shapes only (no weight is read, the image stays empty).
  /// `cache_quantized` is the cache length the graph's attentions must have been quantized
  /// for (options.max_cache, except in the context-independence probe).
  Context(const ir::Graph& graph, const Options& options, const ir::WeightReader* weights,
          const ir::Int8View& codes, bool verify_programs, int64_t cache_quantized)
      : g(graph),
        o(options),
        weights(weights),
        codes(codes),
        verify_programs(verify_programs),
        cache_quantized(cache_quantized) {}

  const ir::Graph& g;
  const Options& o;
  const ir::WeightReader* weights;
  const ir::Int8View codes;  // a copy: the view is a small function object
  const bool verify_programs;
  const int64_t cache_quantized;
  isa::Bundle b;
  PlanState plan;
  pass::ResourceSet have = 0;
  /// Compiles the same graph with other options, shapes only, through the pipeline
  /// npu-probe (check-context's second compile at twice the cache).
  std::function<StatusOr<isa::Bundle>(const Options&)> probe;

  /// The index of instruction pass tag `name` in b.passes (added on first use).
  int32_t pass_id(const std::string& name);
  /// Rows per tile of a row-wise stage: the largest power of two up to min(cap, 128) whose
  /// double-buffered rows fit the SRAM budget beside `fixed` bytes.
  int64_t row_tile(int64_t bytes_per_row, int64_t fixed, int64_t cap) const;

  // The pass manager's hooks.
  static std::string describe(pass::ResourceSet r);
  pass::ResourceSet available() const { return have; }
  Status health() const { return ok_status(); }
  /// The program verifier (docs/npu.md V1..V8) once the programs have their tokens, when
  /// the pipeline verifies.
  Status verify() const;
  /// The plan (before lower) or the programs (after) as text.
  StatusOr<std::string> dump_text() const;
};

inline int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }
inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The plan's own text: each planned node's tiles and each value's DRAM place.
std::string plan_text(const Context& cx);

}  // namespace qbc::npu
