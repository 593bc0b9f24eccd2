// plan-tiles (docs/npu.md "Passes"): the graph checks, the plan's header and node table, the
// bundle header, and the tile sizes of every qlinear (M x N x K with double-buffered weight
// tiles), attention (query rows x cache chunks, and the KV append's row tiles) and row-wise
// node (row tiles), chosen for the target's SRAM budget and never for the context length.
// Each stage's SRAM need under the size model goes into the plan (P4).
#include <algorithm>
#include <memory>
#include <numeric>
#include <string>

#include "backend.h"
#include "passes.h"
#include "qbc/ir/builder.h"
#include "qbc/ir/host_inputs.h"
#include "qbc/ir/op_params.h"
#include "qbc/ir/phase_image.h"
#include "qbc/ir/verifier.h"
#include "qbc/runner/mrope.h"

namespace qbc::npu {
namespace {

using ir::Node;
using ir::Op;
using isa::DType;

/// A rope_table node the backend lowers: in a decoder (M-RoPE), on the host's rope_cos and
/// rope_sin inputs, which every call fills per token; in a graph without token positions (a
/// vision tower's feature graph), on any two graph inputs of head_dim / 2 columns, which are
/// then feature inputs like the patch rows.
Status check_rope_table(const Context& cx, const Node& n) {
  const bool features = std::none_of(cx.g.nodes().begin(), cx.g.nodes().end(), [](const Node& t) {
    return t.op == Op::kInput && t.type.dtype == ir::DType::kI64;
  });
  auto input_named = [&](size_t k, const char* name) {
    const Node& t = cx.g.node(n.operands[k].value);
    return t.op == Op::kInput && (features || t.name == name);
  };
  if (n.operands.size() != 3 || !input_named(1, "rope_cos") || !input_named(2, "rope_sin") ||
      (!features && cx.plan.positions < 0)) {
    return unimplemented(ir::describe(n),
                         ": op 'rope_table' has no ARIES backend lowering yet "
                         "outside a decoder's host rope tables (docs/multimodal.md)");
  }
  const int64_t hd = n.attrs.get_int("head_dim"), heads = n.attrs.get_int("num_heads");
  if (hd < 2 || hd % 2 != 0 || heads < 1 || n.type.dim(-1) != heads * hd)
    return invalid_argument(ir::describe(n), ": ", heads, " heads of head_dim ", hd, " for ",
                            n.type.dim(-1), " columns");
  for (size_t k = 1; features && k < 3; ++k) {
    const Node& t = cx.g.node(n.operands[k].value);
    if (t.type.dim(-1) != hd / 2)
      return invalid_argument(ir::describe(n), ": table input ", ir::describe(t), " has ",
                              t.type.dim(-1), " columns, not head_dim / 2 = ", hd / 2);
  }
  return ok_status();
}

/// A graph without a positions input is a feature graph (a vision tower, docs/npu.md "Feature
/// bundles"): every input is a row input of the image's rows, the chunk is that row count, and
/// no op may need token positions.
Status check_feature_graph(Context& cx) {
  const auto& nodes = cx.g.nodes();
  cx.plan.embeds = -1;  // every input is a feature input, the rope tables too
  cx.plan.rope_cos = cx.plan.rope_sin = -1;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.op == Op::kAttention || n.op == Op::kRope)
      return unimplemented(ir::describe(n), ": op '", ir::op_info(n.op).name,
                           "' in a graph without positions (a feature graph) has no ARIES "
                           "lowering");
    if (n.op != Op::kInput) continue;
    if (n.type.rank() != 3 || n.type.dim(1) != cx.o.chunk)
      return invalid_argument(ir::describe(n), ": a feature graph's input ", n.type.to_string(),
                              " must be [1, rows, width] with rows the compiled chunk ", cx.o.chunk,
                              " (the image's rows)");
    cx.plan.feature_inputs.push_back(static_cast<int32_t>(i));
  }
  if (cx.plan.feature_inputs.empty())
    return invalid_argument("graph '", cx.g.name(), "' has neither positions nor inputs");
  return ok_status();
}

/// The graph is one the backend compiles; finds its inputs and output.
Status check_graph(Context& cx) {
  const auto& nodes = cx.g.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    switch (n.op) {
      case Op::kInput:
        if (n.type.dtype == ir::DType::kI64) {
          cx.plan.positions = static_cast<int32_t>(i);
        } else if (n.name == "rope_cos" || n.name == "rope_sin") {  // M-RoPE: host tables
          (n.name == "rope_cos" ? cx.plan.rope_cos : cx.plan.rope_sin) = static_cast<int32_t>(i);
        } else if (ir::is_deepstack_input(n.name)) {  // Qwen3-VL: host rows per token
          // Level J is the J-th such input: the runtime fills the buffers in that order.
          if (n.name != ir::deepstack_input_name(static_cast<int64_t>(cx.plan.deepstack.size())))
            return invalid_argument(
                ir::describe(n), ": DeepStack input ", cx.plan.deepstack.size(), " must be named '",
                ir::deepstack_input_name(static_cast<int64_t>(cx.plan.deepstack.size())),
                "' (levels in order)");
          cx.plan.deepstack.push_back(static_cast<int32_t>(i));
        } else {
          cx.plan.embeds = static_cast<int32_t>(i);
        }
        break;
      case Op::kLinear:
        return unimplemented(ir::describe(n),
                             ": a float linear; the ARIES backend runs integer matmuls only "
                             "(quantize every linear: `qbc quantize`, bit.transformer.*)");
      case Op::kAttention: {
        if (!n.attrs.has("k_bits")) {
          return unimplemented(ir::describe(n),
                               ": attention with a float KV cache; the ARIES backend needs a "
                               "quantized cache (bit.kvCache.key / bit.kvCache.value)");
        }
        QBC_ASSIGN_OR_RETURN(const int64_t max_cache, ir::required_int(n, "max_cache"));
        if (max_cache < cx.cache_quantized) {
          return failed_precondition(
              ir::describe(n), ": quantized for a cache of ", max_cache,
              " positions, but the backend compiles ", cx.o.max_cache,
              " (llm.attributes.maxCacheLength); key scales are only valid for the positions the "
              "graph was quantized for: quantize again with the larger maxCacheLength");
        }
        break;
      }
      case Op::kRopeTable:
        QBC_RETURN_IF_ERROR(check_rope_table(cx, n));
        break;
      case Op::kFullAttention: {
        QBC_ASSIGN_OR_RETURN(const ir::FullAttentionParams fa, ir::full_attention_params(n));
        if (!fa.attention.quantized)
          return unimplemented(ir::describe(n),
                               ": unquantized full_attention; the ARIES backend needs its "
                               "static Q, K and V codes (quant::quantize_vision)");
        int64_t total = 0;
        for (int64_t len : fa.segments) total += len;
        if (!fa.segments.empty() && total != n.type.dim(1))
          return invalid_argument(ir::describe(n), ": segments cover ", total, " of ",
                                  n.type.dim(1), " rows");
        break;
      }
      case Op::kGelu:
        break;
      case Op::kMergeRows:
        if (n.attrs.get_int("factor") < 1)
          return invalid_argument(ir::describe(n), ": merge factor ", n.attrs.get_int("factor"));
        break;
      case Op::kAvgPool: {
        const int64_t gw = n.attrs.get_int("grid_w"), k = n.attrs.get_int("kernel");
        if (k < 1 || gw < k || gw % k != 0)
          return invalid_argument(ir::describe(n), ": kernel ", k, " does not divide grid_w ", gw);
        if (n.part == ir::Part::kHead)  // the instruction pools fp16 rows
          return unimplemented(ir::describe(n), ": avg_pool of fp32 head values");
        break;
      }
      case Op::kRope:
        if (n.attrs.get_float("dynamic_factor", 0.0) < 0.0)
          return invalid_argument(ir::describe(n), ": negative dynamic_factor");
        break;
      default:
        break;
    }
  }
  if (cx.plan.positions < 0) QBC_RETURN_IF_ERROR(check_feature_graph(cx));
  if (!cx.plan.features() && (cx.plan.embeds < 0 || cx.plan.positions < 0))
    return invalid_argument("graph '", cx.g.name(), "' needs inputs inputs_embeds and positions");
  if ((cx.plan.rope_cos >= 0) != (cx.plan.rope_sin >= 0))
    return invalid_argument("graph '", cx.g.name(), "' has only one of rope_cos and rope_sin");
  if (cx.plan.rope_cos >= 0) {
    QBC_ASSIGN_OR_RETURN(const runner::MRopeSpec spec,
                         runner::mrope_spec_from_metadata(cx.g.metadata));
    for (int32_t id : {cx.plan.rope_cos, cx.plan.rope_sin}) {
      const Node& t = cx.g.node(id);
      if (t.type.dim(-1) != spec.head_dim / 2)
        return invalid_argument(ir::describe(t), ": ", t.type.dim(-1),
                                " columns; the rope tables of mrope.head_dim ", spec.head_dim,
                                " have ", spec.head_dim / 2);
    }
    cx.b.rope_inputs.head_dim = spec.head_dim;
    cx.b.rope_inputs.theta = spec.theta;
    for (int k = 0; k < 3; ++k) cx.b.rope_inputs.section[k] = spec.section[static_cast<size_t>(k)];
    cx.b.rope_inputs.interleaved = spec.interleaved;
  }
  if (cx.g.outputs().size() != 1 && !cx.plan.features())
    return unimplemented("graph '", cx.g.name(), "' has ", cx.g.outputs().size(),
                         " outputs; the backend compiles decoders with one logits output");
  if (cx.g.outputs().empty()) return invalid_argument("graph '", cx.g.name(), "' has no output");
  cx.plan.output = cx.g.outputs().front();
  cx.plan.extra_outputs.assign(cx.g.outputs().begin() + 1, cx.g.outputs().end());
  for (int32_t id : cx.plan.extra_outputs) {  // side by side: the same rows, distinct values
    const Node& first = cx.g.node(cx.plan.output);
    const Node& n = cx.g.node(id);
    if (n.type.rank() != first.type.rank() || n.type.dim(-2) != first.type.dim(-2))
      return unimplemented(ir::describe(n), ": a feature graph's outputs must have the same rows (",
                           first.type.to_string(), " and ", n.type.to_string(), ")");
    if (std::count(cx.g.outputs().begin(), cx.g.outputs().end(), id) != 1)
      return invalid_argument(ir::describe(n), ": a graph output listed twice");
  }
  for (const ModeRequest& m : cx.o.modes) {
    if (m.cores < 1 || m.cores > cx.o.target.cores()) {
      return invalid_argument("inferenceScheme '", isa::scheme_name(m.scheme), "' needs ", m.cores,
                              " cooperating cores; target '", cx.o.target.name, "' has ",
                              cx.o.target.cores());
    }
  }
  if (cx.o.modes.empty()) return invalid_argument("no inference scheme to compile");
  if (cx.o.chunk < 1 || cx.o.max_cache < cx.o.chunk) {
    return invalid_argument("llm.attributes.maxCoreDataLength ", cx.o.chunk,
                            " must be in [1, maxCacheLength ", cx.o.max_cache, "]");
  }
  return ok_status();
}

/// Rows per tile of a row-wise stage: the largest power of two up to min(cap, 128) whose
/// double-buffered rows fit the SRAM budget beside `fixed` bytes.
int64_t row_tile(int64_t budget, int64_t bytes_per_row, int64_t fixed, int64_t cap) {
  int64_t mt = 1;
  while (mt * 2 <= std::min<int64_t>(cap, 128) && fixed + 2 * mt * bytes_per_row + 256 <= budget)
    mt *= 2;
  return mt;
}

/// The row tile of a row-wise stage of node `n` (its name + `suffix`) and its stage record:
/// `fixed` bytes and one tile of rows (kResourceExhausted when not even one row fits).
StatusOr<int64_t> row_stage(Context& cx, const Node& n, int32_t id, const std::string& suffix,
                            int64_t bytes_per_row, int64_t fixed) {
  const int64_t mt =
      row_tile(cx.plan.sram_budget, bytes_per_row, fixed, cx.plan.rows(static_cast<size_t>(id)));
  const int64_t need = fixed + mt * bytes_per_row;
  if (need > cx.plan.sram_budget) {
    return resource_exhausted(
        ir::describe(n), ": one row tile", suffix.empty() ? "" : " of the KV append", " needs ",
        need, " bytes of SRAM; target '", cx.o.target.name, "' has ", cx.plan.sram_budget);
  }
  cx.plan.stages.push_back({id, n.name + suffix, need, 0});
  return mt;
}

/// avg_pool's row tile: whole bands of output rows (grid_w / kernel windows each, whose inputs
/// are kernel whole grid rows), the most bands, a power of two, whose double-buffered input
/// and output rows fit the SRAM budget.
Status plan_avg_pool(Context& cx, const Node& n, int32_t id, int64_t eb) {
  NodePlan& np = cx.plan.nodes[static_cast<size_t>(id)];
  const int64_t k = n.attrs.get_int("kernel"), ow = n.attrs.get_int("grid_w") / k;
  const int64_t per_band = ow * (k * k + 1) * np.width * eb;
  const int64_t bands = cx.plan.rows(static_cast<size_t>(id)) / ow;
  int64_t nb = 1;
  while (nb * 2 <= bands && 2 * nb * 2 * per_band + 256 <= cx.plan.sram_budget) nb *= 2;
  if (nb * per_band > cx.plan.sram_budget) {
    return resource_exhausted(ir::describe(n), ": one band of ", ow, " windows needs ",
                              nb * per_band, " bytes of SRAM; target '", cx.o.target.name, "' has ",
                              cx.plan.sram_budget);
  }
  np.rows_mt = nb * ow;
  cx.plan.stages.push_back({id, n.name, nb * per_band, 0});
  return ok_status();
}

/// A row-wise node (rms_norm, rope, the elementwise ops): its inputs' and output's rows, and
/// for the norms their parameters, in one stage.
Status plan_rows(Context& cx, const Node& n, int32_t id) {
  int64_t inputs = 0;
  for (const ir::Operand& op : n.operands) {  // rope's positions come from the runtime values
    if (!op.is_weight() && op.value != cx.plan.positions) ++inputs;
  }
  NodePlan& np = cx.plan.nodes[static_cast<size_t>(id)];
  const int64_t W = np.width;
  const int64_t eb = isa::dtype_bytes(value_type(cx.g, id, cx.plan.output), 1);
  if (n.op == Op::kRopeTable) {  // x and y rows, and a cos and a sin row of head_dim/2
    const int64_t half = n.attrs.get_int("head_dim") / 2;
    QBC_ASSIGN_OR_RETURN(np.rows_mt, row_stage(cx, n, id, "", (2 * W + 2 * half) * eb, 0));
    return ok_status();
  }
  if (n.op == Op::kAvgPool) return plan_avg_pool(cx, n, id, eb);
  const int64_t wn =
      n.op == Op::kRmsNorm && n.attrs.get_int("group") > 0 ? n.attrs.get_int("group") : W;
  // The norms' fp32 parameters: rms_norm's weight, layer_norm's weight and bias rows.
  const int64_t fixed = n.op == Op::kRmsNorm ? 4 * wn : n.op == Op::kLayerNorm ? 8 * W : 0;
  QBC_ASSIGN_OR_RETURN(np.rows_mt, row_stage(cx, n, id, "", (inputs + 1) * W * eb, fixed));
  return ok_status();
}

/// `rows`: the node's rows per call (its row tiles are at most that).
Status plan_linear(Context& cx, const Node& n, int64_t rows, LinearPlan* li, int64_t* sram) {
  QBC_ASSIGN_OR_RETURN(const ir::QLinearParams qp, ir::qlinear_params(n));
  const numerics::QLinear& q = qp.linear;
  const ir::Weight* wq = cx.g.find_weight(n.operands[1].weight);
  li->n = wq->type.dims[0];
  li->k = wq->type.dims[1];
  li->w_bits = qp.w_bits;
  li->in_bits = q.in_bits;
  li->group = q.group;
  li->groups = li->group > 0 ? cdiv(li->k, li->group) : 1;
  li->zero = qp.w_zero;
  li->min = qp.w_min;
  li->bias = n.operands.size() > qp.bias_at;
  li->out_fp16 = q.out_fp16;
  const bool dyn = q.in_dynamic, asym = q.in_asym;
  li->mode = dyn ? (asym ? isa::QuantMode::kTokenAffine : isa::QuantMode::kTokenSymmetric)
                 : (asym ? isa::QuantMode::kStaticAffine : isa::QuantMode::kStaticSymmetric);
  li->in_scale = q.in_scale;
  li->in_zero = q.in_zero;
  if (li->w_bits != 4 && li->w_bits != 8) {
    return unimplemented(ir::describe(n), ": ", li->w_bits,
                         "-bit weights; the ARIES MAC array takes 4- or 8-bit weights");
  }
  if (li->in_bits != 8 && li->in_bits != 16)
    return unimplemented(ir::describe(n), ": ", li->in_bits, "-bit activations (8 or 16)");
  const DType wt = isa::code_type(li->w_bits);
  const int64_t cb = li->in_bits == 16 ? 2 : 1;
  // The input rows: fp16, or fp32 when they are a head value kept in fp32 (a projector).
  const int64_t xb = isa::dtype_bytes(value_type(cx.g, n.operands[0].value, -1), 1);
  const int64_t accb = li->in_bits == 16 ? 8 : 4;
  const int64_t yb = li->out_fp16 ? 2 : 4;
  auto bytes = [&](int64_t mt, int64_t nt, int64_t kt) {
    const int64_t gt = li->group > 0 ? cdiv(kt, li->group) : 1;
    // Float offsets: their double-buffered blocks and the row tile's code sums.
    const int64_t mins = li->min ? 2 * nt * gt * 4 + mt * gt * accb + 2 * 16 : 0;
    return mt * li->k * (xb + cb) + 8 * mt + 2 * nt * isa::dtype_bytes(wt, kt) + 2 * nt * gt * 8 +
           2 * nt * 4 + mt * nt * gt * accb + mt * nt * 4 + 2 * mt * nt * yb + 16 * 16 + mins;
  };
  // Channel tiles: a multiple of `unit_n` channels, so every tile's column offset in the
  // output rows is DMA-aligned, and small enough to give each core of the largest mode a
  // tile when the layer allows it.
  const int64_t unit_n = std::max<int64_t>(8, cx.o.target.dma_align / yb);
  const int64_t cores = cx.o.target.cores();
  int64_t nt_cap = std::max<int64_t>(unit_n, align_up(cdiv(li->n, cores), unit_n));
  nt_cap = std::min<int64_t>(nt_cap, align_up(li->n, unit_n));
  for (int64_t mt = std::min<int64_t>(rows, 64); mt >= 1; mt /= 2) {
    if (mt * li->k * (xb + cb) + 512 > cx.plan.sram_budget) continue;
    // K tiles: the whole row, else halves that stay multiples of the group (or of 32).
    const int64_t unit = li->group > 0 ? li->group : 32;
    for (int64_t kt = li->k; kt >= 1;) {
      for (int64_t nt = std::min<int64_t>(nt_cap, std::max<int64_t>(512, unit_n)); nt >= unit_n;
           nt /= 2) {
        const int64_t ntr = align_up(nt, unit_n);
        if (bytes(mt, ntr, kt) <= cx.plan.sram_budget) {
          li->t = LinearTiles{ntr, kt, mt};
          li->ntiles = cdiv(li->n, ntr);
          li->ktiles = cdiv(li->k, kt);
          li->gt = li->group > 0 ? cdiv(kt, li->group) : 1;
          *sram = bytes(mt, ntr, kt);
          return ok_status();
        }
      }
      if (kt == li->k) {
        kt = std::max<int64_t>(unit, align_up(cdiv(li->k, 2), unit));
        if (kt >= li->k) break;
      } else if (kt / 2 >= unit && (kt / 2) % unit == 0) {
        kt /= 2;
      } else {
        break;
      }
    }
  }
  return resource_exhausted(ir::describe(n), ": no tile of [", li->n, " x ", li->k, "] fits the ",
                            cx.plan.sram_budget, "-byte SRAM of target '", cx.o.target.name,
                            "' (even one row of inputs and codes needs ", li->k * (xb + cb),
                            " bytes)");
}

}  // namespace

std::vector<int64_t> segment_lengths(const Node& n) {
  std::vector<int64_t> v =
      n.attrs.has("segments") ? n.attrs.get_ints("segments") : std::vector<int64_t>();
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

namespace {

/// The attention descriptor of `n` (its shape, quantization, KV4 rules, the cache or ring
/// capacity, K's rope when its keys rotate), checked: bit widths the backend lowers.
StatusOr<isa::AttnDesc> attention_desc(const Context& cx, const Node& n) {
  numerics::Attention a;
  if (n.op == Op::kFullAttention) {
    QBC_ASSIGN_OR_RETURN(ir::FullAttentionParams fa, ir::full_attention_params(n));
    a = std::move(fa.attention);
  } else {
    QBC_ASSIGN_OR_RETURN(a, ir::attention_params(n));
  }
  if (!a.quantized)
    return internal_error(ir::describe(n), ": a float KV cache past the graph check");
  isa::AttnDesc d;
  d.heads = a.heads;
  d.kv_heads = a.kv_heads;
  d.head_dim = a.head_dim;
  d.window = a.window;
  d.scale = a.scale;
  d.softcap = a.softcap;
  d.k_bits = a.k_bits;
  d.v_bits = a.v_bits;
  d.p_bits = a.p_bits;
  d.q_dynamic = a.q_dynamic;
  d.rotating = !a.k_rot_offset.empty();
  d.bidirectional = n.op == Op::kFullAttention;
  d.k_token_scale = a.k_token_scale;
  d.qk_hadamard = a.qk_hadamard;
  d.k_asym = a.k_asym;
  d.v_token_scale = a.v_token_scale;
  d.k_group = a.k_group;
  if (const std::string why = isa::kv4_fields_problem(d); !why.empty())
    return invalid_argument(ir::describe(n), ": the KV4 rules: ", why);
  for (int bits : {d.k_bits, d.v_bits}) {
    if (bits != 4 && bits != 8 && bits != 16)
      return unimplemented(ir::describe(n), ": ", bits, "-bit KV cache (4, 8 or 16)");
  }
  if (d.k_bits == 4 && d.head_dim % 2 != 0)
    return unimplemented(ir::describe(n), ": int4 keys need an even head_dim");
  // Sliding-window layers keep a ring of window + chunk positions, global layers the cache.
  d.capacity =
      d.window > 0 ? std::min<int64_t>(cx.o.max_cache, d.window + cx.o.chunk) : cx.o.max_cache;
  if (d.rotating) {
    const Node& k = cx.g.node(n.operands[1].value);
    if (k.op != Op::kRope)
      return invalid_argument(ir::describe(n), ": k_rot_offset needs K from a rope node");
    const int32_t rope = cx.plan.nodes[static_cast<size_t>(n.operands[1].value)].rope;
    if (rope < 0) return internal_error(ir::describe(n), ": K's rope was not planned");
    d.k_rope = rope;
  }
  return d;
}

Status plan_attention(Context& cx, const Node& n, int32_t id, AttentionPlan* ai) {
  QBC_ASSIGN_OR_RETURN(isa::AttnDesc d, attention_desc(cx, n));
  const int64_t g = d.heads / d.kv_heads, hd = d.head_dim, H = d.heads, KV = d.kv_heads;
  // Each stored key / value of a KV head is a record (its codes, then the KV4 rules' per-token
  // fields). A cache row per (KV head, position) pads it to the DMA alignment; 4-bit codes and
  // records that would waste bytes so are packed instead (isa::AttnDesc::packed): dense
  // records, appended through whole aligned blocks, a chunk of bc records moved as one row.
  const int64_t A = cx.o.target.dma_align, kr = d.key_record(), vr = d.value_record();
  const int64_t block = kv_block(d, A);
  d.packed = !d.bidirectional && block > 0 &&
             (d.token_fields() || d.k_bits == 4 || d.v_bits == 4) && (kr % A != 0 || vr % A != 0);
  ai->params_bytes = 4 * isa::attn_params_floats(H, KV, hd);
  const int64_t P = cx.o.target.cores();
  auto bytes = [&](int64_t br, int64_t bc) {
    const int64_t rg = br * g;
    return 2 * br * H * hd * 2 /* q tile, y tile */ +
           KV * (rg * hd * 4 + rg * 4 * 2 + rg * 8 + rg * hd * 8) /* per-head state */ +
           ai->params_bytes + 2 * bc * ai->krow + 2 * bc * ai->vrow + rg * bc * 4 + P * rg * 4 +
           P * rg * (hd + 1) * 8 + rg * (hd + 1) * 8 + 32 * 16;
  };
  // Query rows per tile: a causal prefill's chunk is short (16 rows); a bidirectional
  // attention (a vision tower's) takes all its rows at once, and 64-row tiles read every key
  // block a quarter as often (and issue a quarter of the instructions) as 16-row ones.
  int64_t bc = 0, br = 0;
  auto tiles = [&] {
    ai->krow = d.packed ? kr : align_up(kr, A);
    ai->vrow = d.packed ? vr : align_up(vr, A);
    // (Not tied to the cache length: check-context compiles again at twice the cache and
    // wants the same tiles; a packed cache is whole chunks, kv_slots.)
    bc = hd <= 64 ? 256 : hd <= 128 ? 128 : 64;
    br = std::min<int64_t>(cx.o.chunk, d.bidirectional ? 64 : 16);
    while (bytes(br, bc) > cx.plan.sram_budget && (bc > 16 || br > 1)) {
      if (bc > 16 && (bc >= 4 * br || br == 1)) {
        bc /= 2;
      } else {
        br = std::max<int64_t>(1, br / 2);
      }
    }
  };
  tiles();
  if (d.packed && bc % block != 0) {  // a chunk must be whole blocks: pad the rows instead
    d.packed = false;
    tiles();
  }
  if (bytes(br, bc) > cx.plan.sram_budget) {
    return resource_exhausted(ir::describe(n),
                              ": the smallest attention tile (1 query row, 16 "
                              "cache positions) needs ",
                              bytes(br, bc), " bytes of SRAM; target '", cx.o.target.name, "' has ",
                              cx.plan.sram_budget);
  }
  ai->t = AttnTiles{br, bc};
  // A packed ring holds whole chunks (a chunk never wraps inside it), and two blocks more than
  // window + chunk, so the blocks one append tile touches are distinct slots of it.
  if (d.packed && d.capacity < cx.o.max_cache)
    d.capacity = std::min(cx.o.max_cache, align_up(d.capacity + 2 * block, bc));
  const int64_t kvw = KV * hd;
  // K and V in fp16, then their records (at most 2 bytes per channel for KV8 and KV16); a
  // packed append also holds the partial blocks at both ends of its rows.
  const int64_t append_row =
      kvw * (2 + 2) + std::max(KV * (kr + vr), 2 * isa::dtype_bytes(DType::kI16, kvw));
  const int64_t append_fixed = ai->params_bytes + (d.packed ? 2 * block * KV * (kr + vr) : 0);
  QBC_ASSIGN_OR_RETURN(ai->append_mt, row_stage(cx, n, id, ".append", append_row, append_fixed));
  cx.plan.stages.push_back({id, n.name, bytes(br, bc), 0});
  ai->heads = H;
  ai->kv_heads = KV;
  ai->head_dim = hd;
  ai->window = d.window;
  ai->capacity = d.capacity;
  ai->k_bits = d.k_bits;
  ai->v_bits = d.v_bits;
  cx.b.attentions.push_back(d);
  ai->desc = static_cast<int32_t>(cx.b.attentions.size() - 1);
  if (n.op == Op::kFullAttention) {  // window attention: one descriptor per segment length
    for (int64_t len : segment_lengths(n)) {
      isa::AttnDesc w = d;
      w.window = len;
      cx.b.attentions.push_back(w);
    }
  }
  return ok_status();
}

/// The plan's and the bundle's header from the target and the options, and the node table.
void set_header(Context& cx) {
  const Target& t = cx.o.target;
  cx.b.target = t.name;
  cx.b.target_cores = t.cores();
  cx.b.target_clusters = t.clusters;
  cx.b.sram_bytes = t.sram_bytes;
  cx.b.dram_bytes = t.dram_bytes;
  cx.b.dma_align = t.dma_align;
  cx.b.max_cache = cx.o.max_cache;
  cx.b.chunk = cx.o.chunk;
  cx.b.batch = cx.o.batch;
  Plan& p = cx.plan;
  p.graph = cx.g.name();
  p.target = t.name;
  p.cores = t.cores();
  p.sram_budget = t.sram_bytes;
  p.dram_bytes = t.dram_bytes;
  p.dram_reserve = t.dram_reserve;
  p.dma_align = t.dma_align;
  p.max_cache = cx.o.max_cache;
  p.chunk = cx.o.chunk;
  p.batch = cx.o.batch;
  for (const Node& n : cx.g.nodes()) {
    cx.b.nodes.push_back(n.name);
    NodePlan np;
    np.name = n.name;
    np.op = ir::op_info(n.op).name;
    np.kind = n.op == Op::kInput                                     ? NodeKind::kInput
              : n.op == Op::kSlice || n.op == Op::kMergeRows         ? NodeKind::kSlice
              : n.op == Op::kQLinear                                 ? NodeKind::kLinear
              : n.op == Op::kAttention || n.op == Op::kFullAttention ? NodeKind::kAttention
                                                                     : NodeKind::kRows;
    np.width =
        n.op == Op::kSlice ? n.attrs.get_int("end") - n.attrs.get_int("start") : n.type.dim(-1);
    p.nodes.push_back(std::move(np));
  }
}

/// Row counts (docs/npu.md "Feature bundles"): a node's value has the graph's rows over its
/// row_div, which is its operands' (equal over them) times the factor of a merge_rows (or an
/// avg_pool's kernel squared). Only a feature graph merges rows (its calls always carry the
/// compiled chunk, which the factors must divide), and nothing that mixes rows across positions
/// (attention, rope tables) may follow a merge.
Status plan_row_counts(Context& cx) {
  const auto& nodes = cx.g.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    int64_t div = 0;
    for (const ir::Operand& op : n.operands) {
      if (op.is_weight()) continue;
      const int64_t d = cx.plan.nodes[static_cast<size_t>(op.value)].row_div;
      if (div != 0 && d != div)
        return unimplemented(ir::describe(n), ": operands with ", div, " and ", d,
                             " graph rows per row (one is past a merge_rows, one is not)");
      div = d;
    }
    if (div == 0) div = 1;
    if (n.op == Op::kMergeRows) {
      if (!cx.plan.features())
        return unimplemented(ir::describe(n),
                             ": merge_rows outside a feature graph (a decoder's rows are tokens)");
      div *= n.attrs.get_int("factor");
      if (cx.o.chunk % div != 0)
        return invalid_argument(ir::describe(n), ": merges ", div, " rows into one, but the ",
                                cx.o.chunk, " rows of a call are not a multiple of ", div);
    }
    if (n.op == Op::kAvgPool) {  // whole bands of kernel grid rows in every call
      if (!cx.plan.features())
        return unimplemented(ir::describe(n), ": avg_pool outside a feature graph");
      const int64_t k = n.attrs.get_int("kernel"), band = k * n.attrs.get_int("grid_w");
      if ((cx.o.chunk / div) % band != 0)
        return invalid_argument(ir::describe(n), ": pools ", k, "x", k, " windows of a grid ",
                                n.attrs.get_int("grid_w"), " rows wide, but the ", cx.o.chunk / div,
                                " rows of a call are not whole bands of ", band);
      div *= k * k;
    }
    if (div != 1 && (n.op == Op::kAttention || n.op == Op::kFullAttention || n.op == Op::kRope ||
                     n.op == Op::kRopeTable)) {
      return unimplemented(ir::describe(n), ": op '", ir::op_info(n.op).name,
                           "' after a merge_rows or avg_pool has no ARIES lowering");
    }
    cx.plan.nodes[i].row_div = div;
  }
  return ok_status();
}

/// The rope node's frequency table as a descriptor of the bundle.
Status plan_rope(Context& cx, const Node& n, int id) {
  QBC_ASSIGN_OR_RETURN(const numerics::Rope rp, ir::rope_params(n));
  isa::RopeDesc r;  // the ISA's copy (isa may not depend on numerics)
  r.heads = rp.heads;
  r.head_dim = rp.head_dim;
  r.rotary_dim = rp.rotary_dim;
  r.inv_freq = rp.inv_freq;
  r.long_inv_freq = rp.long_inv_freq;
  r.attention_factor = rp.attention_factor;
  r.dynamic_factor = rp.dynamic_factor;
  r.original_max_positions = rp.original_max_positions;
  r.theta = rp.theta;
  cx.b.ropes.push_back(std::move(r));
  cx.plan.nodes[static_cast<size_t>(id)].rope = static_cast<int32_t>(cx.b.ropes.size() - 1);
  return ok_status();
}

/// The tiles of node `id` and its stages.
Status plan_node(Context& cx, const Node& n, int32_t id) {
  NodePlan& np = cx.plan.nodes[static_cast<size_t>(id)];
  if (n.op == Op::kRope) QBC_RETURN_IF_ERROR(plan_rope(cx, n, id));
  if (np.kind == NodeKind::kInput || np.kind == NodeKind::kSlice) return ok_status();
  np.stage = static_cast<int32_t>(cx.plan.stages.size());
  if (np.kind == NodeKind::kLinear) {
    int64_t sram = 0;
    const int64_t rows = cx.plan.rows(static_cast<size_t>(id));
    QBC_RETURN_IF_ERROR(plan_linear(cx, n, rows, &np.linear, &sram));
    // A second weight image (bit.prefill / bit.decode): its own tiles for its width and
    // groups, in the same stage (the stage plans the larger of the two).
    QBC_ASSIGN_OR_RETURN(const std::optional<ir::ImagePhase> phase, ir::second_image_phase(n));
    if (phase) {
      QBC_ASSIGN_OR_RETURN(const Node view, ir::node_for_phase(n, *phase));
      int64_t second = 0;
      QBC_RETURN_IF_ERROR(plan_linear(cx, view, rows, &np.second, &second)
                              .with_context("its ", ir::image_phase_name(*phase), " image"));
      np.second_for =
          *phase == ir::ImagePhase::kPrefill ? isa::Phase::kPrefill : isa::Phase::kDecode;
      sram = std::max(sram, second);
    }
    cx.plan.stages.push_back({id, n.name, sram, 0});
    return ok_status();
  }
  if (np.kind == NodeKind::kAttention) return plan_attention(cx, n, id, &np.attention);
  return plan_rows(cx, n, id);
}

/// plan-tiles: checks the graph, writes the headers, and chooses every node's tiles (and the
/// attention and rope descriptors) for the target's SRAM.
class PlanTiles final : public pass::Pass<Context> {
 public:
  std::string name() const override { return "plan-tiles"; }
  pass::ResourceSet provides() const override { return Context::kTiles; }
  StatusOr<bool> run(Context& cx) override {
    QBC_RETURN_IF_ERROR(ir::verify(cx.g));
    QBC_RETURN_IF_ERROR(check_graph(cx));
    set_header(cx);
    QBC_RETURN_IF_ERROR(plan_row_counts(cx));
    for (size_t i = 0; i < cx.g.nodes().size(); ++i)
      QBC_RETURN_IF_ERROR(plan_node(cx, cx.g.nodes()[i], static_cast<int32_t>(i)));
    cx.plan.tiled = true;
    cx.have |= Context::kTiles;
    return true;  // the header and the tiles are new
  }
};

}  // namespace

isa::DType value_type(const ir::Graph& g, int32_t id, int32_t output) {
  if (id == output) return DType::kF32;
  const Node& n = g.node(id);
  if (n.op == Op::kMergeRows) return value_type(g, n.operands[0].value, output);  // a view
  const bool f32 = n.part == ir::Part::kHead && n.op != Op::kRmsNorm && n.op != Op::kLayerNorm &&
                   !(n.op == Op::kQLinear && n.attrs.get_int("out_fp16") != 0);
  return f32 ? DType::kF32 : DType::kF16;
}

StatusOr<Node> second_image_node(const Node& n, const NodePlan& np) {
  return ir::node_for_phase(
      n, np.second_for == isa::Phase::kDecode ? ir::ImagePhase::kDecode : ir::ImagePhase::kPrefill);
}

int64_t kv_block(const isa::AttnDesc& d, int64_t align) {
  if (align <= 0 || (align & (align - 1)) != 0) return 0;
  auto blk = [&](int64_t record) { return align / std::gcd(record, align); };
  return std::max(blk(d.key_record()), blk(d.value_record()));  // powers of two: their lcm
}

int64_t kv_slots(const AttentionPlan& ai, const isa::AttnDesc& d) {
  return d.packed ? align_up(ai.capacity, ai.t.bc) : ai.capacity;
}

PassPtr make_plan_tiles() { return std::make_unique<PlanTiles>(); }

}  // namespace qbc::npu
