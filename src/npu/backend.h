// Internal to the backend: the context its passes share (docs/npu.md "Passes"). It holds
// the graph being compiled, the options, the decisions the passes have made so far (the
// public npu::Plan of qbc/npu/plan.h: each node's tiles, each value's DRAM place, the
// stages, the buffers and regions) and the bundle they build. Each pass reads what an
// earlier pass provided (the resource bits) and writes its own part; nothing else is shared
// between passes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lowering.h"
#include "qbc/ir/graph.h"
#include "qbc/ir/weight_reader.h"
#include "qbc/isa/program.h"
#include "qbc/npu/compile.h"
#include "qbc/npu/plan.h"
#include "qbc/pass/pass.h"

namespace qbc::npu {

/// A compile's result: the bundle and the plan it was built from.
struct Compiled {
  isa::Bundle bundle;
  Plan plan;
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
          const ir::WeightViews& views, bool verify_programs, int64_t cache_quantized)
      : g(graph),
        o(options),
        weights(weights),
        codes(views.codes),
        bf16(views.bf16),
        codes_done(views.codes_done),
        verify_programs(verify_programs),
        cache_quantized(cache_quantized) {}

  const ir::Graph& g;
  const Options& o;
  const ir::WeightReader* weights;
  const ir::Int8View codes;       // a copy: the view is a small function object
  const ir::Bf16View bf16;        // the host embedding as stored, when it is bf16 (may be empty)
  const ir::ViewDone codes_done;  // fill-weights is done with a `codes` view (may be empty)
  const bool verify_programs;
  const int64_t cache_quantized;
  isa::Bundle b;
  Plan plan;
  pass::ResourceSet have = 0;
  /// Compiles the same graph with other options, shapes only, through the pipeline
  /// npu-probe (check-context's second compile at twice the cache).
  std::function<StatusOr<Compiled>(const Options&)> probe;

  /// The index of instruction pass tag `name` in b.passes (added on first use).
  int32_t pass_id(const std::string& name);

  // The pass manager's hooks.
  static std::string describe(pass::ResourceSet r);
  pass::ResourceSet available() const { return have; }
  Status health() const { return ok_status(); }
  /// The plan verifier (docs/npu.md P1..P9) once there are tiles, and the program verifier
  /// (V1..V8) once the programs have their tokens, when the pipeline verifies.
  Status verify() const;
  /// The plan (before lower) or the programs (after) as text.
  StatusOr<std::string> dump_text() const;
};

inline int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }
inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Packed caches (isa::AttnDesc::packed): records per block whose key and value records
/// both fill whole DMA-aligned bytes (the KV append's unit); 0 when the alignment is not a
/// power of two.
int64_t kv_block(const isa::AttnDesc& d, int64_t align);
/// Records per KV head in an attention's DRAM caches: its capacity, for packed caches rounded
/// up to whole cache chunks of `t.bc` records (each loaded as one row).
int64_t kv_slots(const AttentionPlan& ai, const isa::AttnDesc& d);

/// The plan's text (print_plan) and, once filled, a line on the weight image.
std::string plan_text(const Context& cx);

/// The type of value `id` in DRAM: fp32 for the logits output and the head's values other
/// than rms_norm and fp16-out qlinears, else fp16 (slices: their input's; plan_tiles.cpp).
isa::DType value_type(const ir::Graph& g, int32_t id, int32_t output);

/// Node `n` as the programs that read its second weight image see it (np.has_second()):
/// ir::node_for_phase for np.second_for (plan_tiles.cpp).
StatusOr<ir::Node> second_image_node(const ir::Node& n, const NodePlan& np);

/// The DRAM buffers of the plan as the bundle's first buffers (plan-memory).
void emit_buffers(const Plan& plan, isa::Bundle* b);

}  // namespace qbc::npu
