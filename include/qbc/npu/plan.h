// The backend's plan as data (docs/npu.md "The plan"): what the planning passes decide
// before any instruction is emitted, and what lowering reads. Per node its tiles and the
// DRAM place of its value, the SRAM stages with their budget, the DRAM buffers (each KV
// buffer tagged with whether it grows with the cache) and the regions. The passes of
// src/npu read and write a Plan and nothing else of their own; print_plan writes it as text
// and verify_plan checks the numbered invariants P1..P10 of docs/npu.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qbc/isa/program.h"
#include "qbc/support/status.h"

namespace qbc::npu {

/// Where an MBLT value lives in DRAM: rows of `width` elements `stride` bytes apart,
/// starting `col` bytes into each row of buffer `buf` (slices alias their input).
struct ValueLoc {
  int32_t buf = -1;
  int64_t col = 0, stride = 0, width = 0;
  isa::DType type = isa::DType::kF16;
};

/// Tile sizes of a qlinear, shared by every mode and phase (the weight image is tiled once).
struct LinearTiles {
  int64_t nt = 0, kt = 0;  ///< channels and inputs per weight tile
  int64_t mt = 0;          ///< rows per activation tile (prefill; decode uses 1)
};

/// Tile sizes of an attention node.
struct AttnTiles {
  int64_t br = 1, bc = 16;
};

/// A qlinear's decoded attributes, its tiles and its place in the weight image.
struct LinearPlan {
  int64_t n = 0, k = 0, group = 0, groups = 1;  ///< groups: scale columns per channel
  int w_bits = 8, in_bits = 8;
  bool zero = false, bias = false, out_fp16 = true;
  bool min = false;  ///< float offsets per scale (w_min: GGUF Q4_1 / Q5_1 codes kept)
  isa::QuantMode mode = isa::QuantMode::kTokenAffine;
  float in_scale = 1.0f;
  int32_t in_zero = 0;
  LinearTiles t;
  int64_t ntiles = 0, ktiles = 0, gt = 1;  ///< gt: groups per k tile (grouped) or 1
  int32_t buf = -1;                        ///< DRAM weights buffer (plan-memory)
  /// Offsets inside buf (bytes): w block per (n tile, k tile), scales and zero points per
  /// (n tile, k tile) when grouped else per n tile, bias per n tile (plan-memory); offset
  /// blocks (min) like the scale blocks, after the zero points, ws_bytes each.
  std::vector<int64_t> w_off, ws_off, wz_off, wm_off, b_off;
  int64_t w_bytes = 0;  ///< bytes of one full w tile
  /// Bytes of one stored scale / zero-point block: fp32 / int32, or fp16 / packed int4
  /// (int8 for 8-bit codes) for the compact grouped image (compact_weights.h) (plan-memory).
  int64_t ws_bytes = 0, wz_bytes = 0;
};

/// An attention's descriptor facts, tiles, parameter block and KV buffers.
struct AttentionPlan {
  int32_t desc = -1;  ///< isa::Bundle::attentions
  int64_t heads = 0, kv_heads = 0, head_dim = 0, window = 0;
  int64_t capacity = 0;  ///< cached positions per KV head: the cache, or a ring
  int32_t k_bits = 8, v_bits = 8;
  AttnTiles t;
  int64_t append_mt = 1;  ///< rows per tile of the KV append stage
  int32_t params = -1;    ///< DRAM buffer of the fp32 parameter block (plan-memory)
  int64_t params_bytes = 0;
  int32_t kcache = -1, vcache = -1;  ///< DRAM KV buffers, per slot (plan-memory)
  int64_t krow = 0, vrow = 0;        ///< bytes per cached row of one head (aligned)
};

/// What a node is to the backend: no work (an input or a slice, which aliases its input),
/// or a stage of one op family.
enum class NodeKind : uint8_t { kInput, kSlice, kLinear, kAttention, kRows };

/// One MBLT node: its tiles (by kind), its SRAM stages and its value's DRAM place.
struct NodePlan {
  std::string name;
  std::string op;  ///< the MBLT op name
  NodeKind kind = NodeKind::kRows;
  int64_t width = 0;         ///< elements per row of the node's value
  int64_t row_div = 1;       ///< the graph's rows over this value's rows (> 1 past merge_rows)
  LinearPlan linear;         ///< kLinear
  AttentionPlan attention;   ///< kAttention
  int64_t rows_mt = 0;       ///< kRows: rows per tile (prefill; decode uses 1)
  int32_t norm_weight = -1;  ///< rms_norm: DRAM buffer of its fp32 weight
  int32_t rope = -1;         ///< rope: isa::Bundle::ropes index
  int32_t stage = -1;        ///< its first SRAM stage in Plan::stages (attention: two)
  ValueLoc place;            ///< plan-memory; buf -1 for the positions input
  int32_t alias = -1;        ///< a view (slice, merge_rows): the node whose value it points into
  int32_t last_use = -1;     ///< the last node reading the value (slices extend their input)
  /// kLinear with a second weight image (qbc/ir/phase_image.h): that image's plan, and the
  /// phase whose programs read it (kPrefill: the prefill and span programs; kDecode: the
  /// decode programs); kSpan (no reader) when the node has one image.
  LinearPlan second;
  isa::Phase second_for = isa::Phase::kSpan;

  bool has_second() const { return second_for != isa::Phase::kSpan; }
  /// The linear plan the programs of `phase` read: `second` when its image is theirs.
  const LinearPlan& linear_for(isa::Phase phase) const {
    const bool prefill_like = phase == isa::Phase::kPrefill || phase == isa::Phase::kSpan;
    const bool second_reads = second_for == isa::Phase::kDecode
                                  ? phase == isa::Phase::kDecode
                                  : second_for == isa::Phase::kPrefill && prefill_like;
    return second_reads ? second : linear;
  }
};

/// One SRAM stage of one node: what the tile plan's size model needs, and the most the
/// lowering's own allocation used on any core, mode and phase (0 before lower).
struct StagePlan {
  int32_t node = -1;
  std::string name;  ///< the node's name, ".append" for an attention's KV append
  int64_t planned = 0, used = 0;
};

/// One DRAM buffer as the plan placed it (the bundle's buffers start with these, in order).
struct DramBuffer {
  std::string name;
  isa::Purpose purpose = isa::Purpose::kWeights;
  isa::DType dtype = isa::DType::kI8;
  int64_t offset = 0, bytes = 0;
  int64_t slot_stride = 0;  ///< per-slot buffers: bytes between sequence slots; 0: shared
  std::vector<int64_t> shape;
  int32_t block = -1;  ///< weights: the decoder block of their node
  bool grows = false;  ///< KV whose capacity is maxCacheLength: grows with the cache
};

/// The plan of one compile.
struct Plan {
  // The target and the options (plan-tiles).
  std::string graph, target;
  int32_t cores = 1;
  int64_t sram_budget = 0;  ///< SRAM bytes per core every stage must fit
  int64_t dram_bytes = 0, dram_reserve = 0, dma_align = 16;
  int64_t max_cache = 0, chunk = 0, batch = 1;
  // What is planned so far: tiles (plan-tiles), places (plan-memory), fit (check-fit).
  bool tiled = false, placed = false, fit_checked = false;
  std::vector<NodePlan> nodes;                       ///< one per MBLT node, by node id
  int32_t embeds = -1, positions = -1, output = -1;  ///< the graph's inputs and output
  /// M-RoPE graphs: the host's rope-table inputs rope_cos, rope_sin (-1: none).
  int32_t rope_cos = -1, rope_sin = -1;
  /// Qwen3-VL: the host's DeepStack inputs deepstack.J, in order (empty: none).
  std::vector<int32_t> deepstack;
  /// Feature graphs (a vision tower; no positions input): every input node, in node order,
  /// and its io buffer (plan-memory). Empty for a decoder. Not in the plan text yet.
  std::vector<int32_t> feature_inputs, feature_bufs;
  bool features() const { return !feature_inputs.empty(); }
  /// Feature graphs with several outputs (Qwen3-VL: the features, then the DeepStack features):
  /// the outputs after `output`, each written beside the previous one in the output buffer's
  /// rows (plan-memory), so a row holds every output's row side by side.
  std::vector<int32_t> extra_outputs;
  /// Rows of node `i`'s value per prefill call: the chunk over its row_div.
  int64_t rows(size_t i) const { return chunk / nodes[i].row_div; }
  std::vector<StagePlan> stages;  ///< in node order
  // plan-memory.
  std::vector<DramBuffer> buffers;
  int32_t input = -1, logits = -1, scratch = -1;  ///< buffers (scratch -1: none)
  int32_t cos_buf = -1, sin_buf = -1;             ///< the rope tables' io buffers (-1: none)
  std::vector<int32_t> deepstack_bufs;            ///< the DeepStack inputs' io buffers
  isa::DramPlan regions;
};

/// The plan as text: the header, per node its tiles and place, the stages, the buffers and
/// the regions; every field, in node and buffer order (the --dump-after text of the
/// planning passes, with the image line the backend adds).
std::string print_plan(const Plan& p);

/// Parses print_plan's text back to the Plan (an `image:` line after the regions, which
/// the backend's fill-weights dump adds, is skipped). print_plan of the result is the text.
/// Errors are kInvalidArgument "label:line:column: expected X (found 'token')".
StatusOr<Plan> parse_plan(const std::string& text, const std::string& label = "<text>");

/// Whether `text` is plan text (its first line starts "plan of graph ").
bool is_plan_text(const std::string& text);

/// Checks P1..P9 of docs/npu.md on `p` (as far as it is planned: tiles, places, fit). The
/// first violation is kFailedPrecondition with a message that starts with the invariant,
/// e.g. "P4 (stage fits SRAM): ", and names the node, value or buffer with the numbers.
Status verify_plan(const Plan& p);

/// P10: `longer` plans the same graph for a longer cache than `p`: the same tiles and stage
/// SRAM, and the same buffers with the same sizes except those tagged as growing.
Status verify_plan_context(const Plan& p, const Plan& longer);

}  // namespace qbc::npu
