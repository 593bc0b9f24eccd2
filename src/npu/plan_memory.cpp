// plan-memory and check-fit (docs/npu.md "Passes", "Memory plan"). plan-memory places every
// DRAM buffer: the pre-tiled weights (one block per channel tile and K tile, then its scales
// and bias), and per sequence slot the KV caches, the io rows, the activations (first fit
// by liveness over node order) and the attention merge scratch; the per-slot region follows
// the weights. check-fit then asks whether the plan fits the device, before any weight is
// read or program lowered.
#include <algorithm>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend.h"
#include "compact_weights.h"
#include "passes.h"
#include "qbc/npu/memory_plan.h"

namespace qbc::npu {
namespace {

using ir::Node;
using ir::Op;
using isa::DType;

/// The running DRAM offsets while plan-memory places buffers.
struct Layout {
  int64_t weights_top = 0, slot_top = 0;
  std::vector<int32_t> slot_buffers;  // buffers placed in the per-slot region
};

/// A DRAM buffer of the plan: in the weight region, or per slot (offset relative until
/// plan_dram rebases it).
int32_t add_dram(Context& cx, Layout& lay, const std::string& name, isa::Purpose p, DType t,
                 int64_t bytes, std::vector<int64_t> shape, bool per_slot) {
  DramBuffer buf;
  buf.name = name;
  buf.purpose = p;
  buf.dtype = t;
  buf.bytes = std::max<int64_t>(align_up(bytes, cx.o.target.dma_align), cx.o.target.dma_align);
  buf.shape = std::move(shape);
  int64_t& top = per_slot ? lay.slot_top : lay.weights_top;
  buf.offset = top;
  top += buf.bytes;
  cx.plan.buffers.push_back(std::move(buf));
  const auto id = static_cast<int32_t>(cx.plan.buffers.size() - 1);
  if (per_slot) lay.slot_buffers.push_back(id);
  return id;
}

/// Per channel tile: its K tiles' weight blocks, then the scale (zero-point, offset) blocks
/// (one per K tile when grouped), then the bias block.
void layout_linear(Context& cx, Layout& lay, const Node& n, LinearPlan& li,
                   const std::string& suffix = "") {
  const int64_t A = cx.o.target.dma_align;
  const LinearTiles& t = li.t;
  const DType wt = isa::code_type(li.w_bits);
  li.w_bytes = align_up(t.nt * isa::dtype_bytes(wt, t.kt), A);
  const bool compact = compact_weights(n, li);
  const int64_t sblk = scale_block_bytes(li, compact, A);
  const int64_t zblk = zero_block_bytes(li, compact, A);
  li.ws_bytes = sblk;
  li.wz_bytes = li.zero ? zblk : 0;
  const int64_t bblk = align_up(t.nt * 4, A);
  const int64_t sblocks = li.group > 0 ? li.ktiles : 1;
  int64_t at = 0;
  for (int64_t nt = 0; nt < li.ntiles; ++nt) {
    for (int64_t kt = 0; kt < li.ktiles; ++kt, at += li.w_bytes) li.w_off.push_back(at);
    for (int64_t kt = 0; kt < sblocks; ++kt) {
      li.ws_off.push_back(at);
      at += sblk;
      if (li.zero) {
        li.wz_off.push_back(at);
        at += zblk;
      }
      if (li.min) {  // offsets: stored like the scales
        li.wm_off.push_back(at);
        at += sblk;
      }
    }
    li.b_off.push_back(at);
    at += bblk;
  }
  li.buf = add_dram(cx, lay, n.name + ".w" + suffix, isa::Purpose::kWeights, wt, at, {li.n, li.k},
                    false);
}

/// The weight region: norm weights, attention parameter blocks, tiled qlinear weights.
Status layout_weights(Context& cx, Layout& lay) {
  const auto& nodes = cx.g.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    NodePlan& np = cx.plan.nodes[i];
    const size_t first = cx.plan.buffers.size();
    if (n.op == Op::kRmsNorm) {
      const int64_t w = cx.g.find_weight(n.operands[1].weight)->type.num_elements();
      np.norm_weight = add_dram(cx, lay, n.name + ".weight", isa::Purpose::kWeights, DType::kF32,
                                4 * w, {w}, false);
    } else if (n.op == Op::kLayerNorm) {  // [2, width]: the weight row, then the bias row
      const int64_t w = cx.g.find_weight(n.operands[1].weight)->type.num_elements();
      np.norm_weight = add_dram(cx, lay, n.name + ".weight", isa::Purpose::kWeights, DType::kF32,
                                8 * w, {2, w}, false);
    } else if (n.op == Op::kAttention || n.op == Op::kFullAttention) {
      AttentionPlan& ai = np.attention;
      ai.params = add_dram(cx, lay, n.name + ".params", isa::Purpose::kWeights, DType::kF32,
                           ai.params_bytes, {ai.params_bytes / 4}, false);
    } else if (n.op == Op::kQLinear) {
      layout_linear(cx, lay, n, np.linear);
      if (np.has_second()) {  // the second image's own buffer, after the first
        QBC_ASSIGN_OR_RETURN(const ir::Node view, second_image_node(n, np));
        layout_linear(cx, lay, view, np.second, std::string(".") + isa::phase_name(np.second_for));
      }
    }
    for (size_t j = first; j < cx.plan.buffers.size(); ++j) cx.plan.buffers[j].block = n.block;
  }
  cx.plan.regions.weights = lay.weights_top;
  return ok_status();
}

/// KV caches, per slot; returns their bytes for one slot.
/// A KV buffer whose capacity is the cache grows with it; a ring's does not.
int64_t plan_kv(Context& cx, Layout& lay) {
  int64_t kv_bytes = 0;
  for (NodePlan& np : cx.plan.nodes) {
    if (np.kind != NodeKind::kAttention) continue;
    AttentionPlan& ai = np.attention;
    const std::vector<int64_t> shape = {ai.kv_heads, ai.capacity, ai.head_dim};
    const int64_t slots = kv_slots(ai, cx.b.attentions[static_cast<size_t>(ai.desc)]);
    ai.kcache = add_dram(cx, lay, np.name + ".kcache", isa::Purpose::kKv, isa::code_type(ai.k_bits),
                         ai.kv_heads * slots * ai.krow, shape, true);
    ai.vcache = add_dram(cx, lay, np.name + ".vcache", isa::Purpose::kKv, isa::code_type(ai.v_bits),
                         ai.kv_heads * slots * ai.vrow, shape, true);
    for (int32_t b : {ai.kcache, ai.vcache}) {
      DramBuffer& buf = cx.plan.buffers[static_cast<size_t>(b)];
      buf.grows = ai.capacity == cx.plan.max_cache;
      kv_bytes += buf.bytes;
    }
  }
  return kv_bytes;
}

/// A view: no instruction; its value points into its input's rows (a slice's columns, or
/// merge_rows' groups of rows read as one wider row).
bool is_view(const Node& n) { return n.op == Op::kSlice || n.op == Op::kMergeRows; }

/// The last node reading each value; views alias their input, so the input lives on to
/// the view's readers.
std::vector<int> last_readers(const std::vector<Node>& nodes) {
  std::vector<int> last(nodes.size(), -1);
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const ir::Operand& op : nodes[i].operands) {
      if (!op.is_weight()) last[static_cast<size_t>(op.value)] = static_cast<int>(i);
    }
  }
  for (size_t i = nodes.size(); i-- > 0;) {
    if (is_view(nodes[i])) {
      const int src = nodes[i].operands[0].value;
      last[static_cast<size_t>(src)] = std::max(last[static_cast<size_t>(src)], last[i]);
    }
  }
  return last;
}

/// Activations: first-fit by liveness over node order (a value lives from its node to its
/// last reader), in one per-slot buffer; slices then point into their input. Returns the
/// buffer.
int32_t plan_activations(Context& cx, Layout& lay) {
  const auto& nodes = cx.g.nodes();
  const int64_t A = cx.o.target.dma_align;
  const std::vector<int> last = last_readers(nodes);
  struct Live {
    int64_t off, bytes;
    int end;
  };
  std::vector<Live> live;
  int64_t act_top = 0;
  std::vector<int> act_values;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.op == Op::kInput || is_view(n) || static_cast<int>(i) == cx.plan.output ||
        std::count(cx.plan.extra_outputs.begin(), cx.plan.extra_outputs.end(), i) != 0)
      continue;
    live.erase(std::remove_if(live.begin(), live.end(),
                              [&](const Live& l) { return l.end < static_cast<int>(i); }),
               live.end());
    const DType t = value_type(cx.g, static_cast<int32_t>(i), cx.plan.output);
    const int64_t width = n.type.dim(-1);
    const int64_t stride = align_up(isa::dtype_bytes(t, width), A);
    const int64_t bytes = cx.plan.rows(i) * stride;
    std::sort(live.begin(), live.end(), [](const Live& a, const Live& b) { return a.off < b.off; });
    int64_t off = 0;
    for (const Live& l : live) {
      if (off + bytes <= l.off) break;
      off = std::max(off, l.off + l.bytes);
    }
    live.push_back(Live{off, bytes, last[i]});
    act_top = std::max(act_top, off + bytes);
    act_values.push_back(static_cast<int>(i));
    cx.plan.nodes[i].place = ValueLoc{-1, off, stride, width, t};
  }
  const int32_t act =
      add_dram(cx, lay, "act", isa::Purpose::kActivations, DType::kF16, act_top, {act_top}, true);
  for (int i : act_values) cx.plan.nodes[static_cast<size_t>(i)].place.buf = act;
  for (size_t i = 0; i < nodes.size(); ++i) {
    cx.plan.nodes[i].last_use = last[i];
    if (!is_view(nodes[i])) continue;
    const int32_t from = nodes[i].operands[0].value;
    const ValueLoc& src = cx.plan.nodes[static_cast<size_t>(from)].place;
    cx.plan.nodes[i].alias = from;
    if (nodes[i].op == Op::kMergeRows) {  // f rows of c columns read as one row of f·c
      const int64_t f = nodes[i].attrs.get_int("factor");
      cx.plan.nodes[i].place = ValueLoc{src.buf, src.col, f * src.stride, f * src.width, src.type};
      continue;
    }
    const int64_t start = nodes[i].attrs.get_int("start"), end = nodes[i].attrs.get_int("end");
    cx.plan.nodes[i].place = ValueLoc{src.buf, src.col + isa::dtype_bytes(src.type, start),
                                      src.stride, end - start, src.type};
  }
  return act;
}

/// Views have no instruction of their own. A slice's consumers load the sliced columns
/// straight from the source rows, so the first sliced byte must be a DMA address
/// (`target.dma_align`; docs/npu.md V3). Buffer offsets and slot strides are aligned, so
/// the column offset decides. A merge_rows' consumers read f source rows as one, so the
/// source rows must be dense (no padding between them). Either case otherwise would need a
/// copy stage the backend does not have: kUnimplemented naming the node.
Status check_views(const Context& cx) {
  const int64_t A = cx.o.target.dma_align;
  for (size_t i = 0; i < cx.plan.nodes.size(); ++i) {
    const Node& n = cx.g.node(static_cast<int32_t>(i));
    const ValueLoc& v = cx.plan.nodes[i].place;
    if (n.op == Op::kMergeRows) {
      const ValueLoc& src = cx.plan.nodes[static_cast<size_t>(n.operands[0].value)].place;
      if (src.stride == isa::dtype_bytes(src.type, src.width)) continue;
      return unimplemented(ir::describe(n), ": its input's rows of ",
                           isa::dtype_bytes(src.type, src.width), " bytes are ", src.stride,
                           " bytes apart; the backend lowers merge_rows as a view of dense rows "
                           "(each row a multiple of the ",
                           A,
                           "-byte DMA alignment, not a column slice) and has no copy for "
                           "padded ones");
    }
    if (n.op != Op::kSlice || v.col % A == 0) continue;
    return unimplemented(ir::describe(n), ": slice start ", n.attrs.get_int("start"), " is byte ",
                         v.col, " of its source's rows, not a multiple of the ", A,
                         "-byte DMA alignment; the backend lowers a slice as a view and has "
                         "no copy for an unaligned one");
  }
  return ok_status();
}

/// The logits rows (fp32 from the head), per slot.
Status plan_output(Context& cx, Layout& lay) {
  std::vector<int32_t> outs{cx.plan.output};
  outs.insert(outs.end(), cx.plan.extra_outputs.begin(), cx.plan.extra_outputs.end());
  int64_t total = 0;  // fp32 values per row: every output side by side
  for (size_t k = 0; k < outs.size(); ++k) {
    const Node& out = cx.g.node(outs[k]);
    if (is_view(out) || out.op == Op::kInput)
      return unimplemented("graph output ", ir::describe(out),
                           " computes nothing (a slice is a view of its source): the backend "
                           "writes the logits from the head node that computes them");
    const bool out_f32 = out.part == ir::Part::kHead &&
                         !(out.op == Op::kQLinear && out.attrs.get_int("out_fp16") != 0);
    if (!out_f32)
      return unimplemented("graph output '", out.name,
                           "' is fp16; the backend writes fp32 logits from the head");
    if (k + 1 < outs.size() && (out.type.dim(-1) * 4) % cx.o.target.dma_align != 0)
      return unimplemented("graph output '", out.name, "': ", out.type.dim(-1),
                           " fp32 values per row are not a multiple of the DMA alignment ",
                           cx.o.target.dma_align, ", so the next output cannot start beside it");
    total += out.type.dim(-1);
  }
  const Node& out = cx.g.node(cx.plan.output);
  const int64_t out_stride = align_up(total * 4, cx.o.target.dma_align);
  const int64_t rows = cx.plan.rows(static_cast<size_t>(cx.plan.output));
  cx.plan.logits = add_dram(cx, lay, cx.plan.features() ? "io." + out.name : "io.logits",
                            isa::Purpose::kIo, DType::kF32, rows * out_stride, {rows, total}, true);
  int64_t col = 0;
  for (int32_t id : outs) {
    const int64_t w = cx.g.node(id).type.dim(-1);
    cx.plan.nodes[static_cast<size_t>(id)].place =
        ValueLoc{cx.plan.logits, col * 4, out_stride, w, DType::kF32};
    col += w;
  }
  return ok_status();
}

/// Attention merge scratch: per core partial maxes and sums of one row tile per KV head;
/// returns its bytes (0: none).
int64_t plan_scratch(Context& cx, Layout& lay) {
  const int64_t A = cx.o.target.dma_align;
  int64_t scratch = 0;
  const int64_t P = cx.o.target.cores();
  for (const NodePlan& np : cx.plan.nodes) {
    if (np.kind != NodeKind::kAttention) continue;
    const AttentionPlan& ai = np.attention;
    const int64_t rg = ai.t.br * (ai.heads / ai.kv_heads);
    scratch = std::max(
        scratch, P * ai.kv_heads * (align_up(rg * 4, A) + align_up(rg * (ai.head_dim + 1) * 8, A)));
  }
  if (scratch > 0) {
    cx.plan.scratch = add_dram(cx, lay, "scratch.merge", isa::Purpose::kScratch, DType::kI64,
                               scratch, {scratch}, true);
  }
  return scratch;
}

/// M-RoPE graphs: the rope tables' io buffers, fp16 [chunk, head_dim/2] per slot, which the
/// host fills per token of each call (nothing here grows with the cache).
void plan_rope_inputs(Context& cx, Layout& lay) {
  Plan& p = cx.plan;
  if (p.rope_cos < 0) return;
  for (const auto& [node, buf, name] : {std::tuple{p.rope_cos, &p.cos_buf, "io.rope_cos"},
                                        std::tuple{p.rope_sin, &p.sin_buf, "io.rope_sin"}}) {
    const int64_t half = cx.g.node(node).type.dim(-1);
    const int64_t stride = align_up(half * 2, cx.o.target.dma_align);
    *buf = add_dram(cx, lay, name, isa::Purpose::kIo, DType::kF16, cx.o.chunk * stride,
                    {cx.o.chunk, half}, true);
    p.nodes[static_cast<size_t>(node)].place = ValueLoc{*buf, 0, stride, half, DType::kF16};
  }
}

/// Host row inputs: an io buffer `io.<input name>` per node of `nodes`, fp16 [chunk, width] per
/// slot with DMA-aligned rows, appended to `bufs` (the host converts its fp32 rows to fp16, as
/// the fake-quant evaluator rounds every input). Feature graphs' inputs, and Qwen3-VL's
/// DeepStack inputs (the image's rows at its tokens, zero elsewhere, filled every call).
void plan_row_inputs(Context& cx, Layout& lay, const std::vector<int32_t>& nodes,
                     std::vector<int32_t>* bufs) {
  for (int32_t node : nodes) {
    const Node& n = cx.g.node(node);
    const int64_t w = n.type.dim(-1);
    const int64_t stride = align_up(w * 2, cx.o.target.dma_align);
    const int32_t buf = add_dram(cx, lay, "io." + n.name, isa::Purpose::kIo, DType::kF16,
                                 cx.o.chunk * stride, {cx.o.chunk, w}, true);
    bufs->push_back(buf);
    cx.plan.nodes[static_cast<size_t>(node)].place = ValueLoc{buf, 0, stride, w, DType::kF16};
  }
}

/// The DRAM plan of the per-slot region (KV, io, activations, scratch), placed after the
/// weights with the slots one after another, and the region totals.
Status plan_dram(Context& cx, Layout& lay) {
  Plan& p = cx.plan;
  const int64_t kv_bytes = plan_kv(cx, lay);
  if (p.features()) {
    plan_row_inputs(cx, lay, p.feature_inputs, &p.feature_bufs);
  } else {
    const int64_t A = cx.o.target.dma_align;
    const int64_t hidden = cx.g.node(p.embeds).type.dim(-1);
    const int64_t in_stride = align_up(hidden * 2, A);
    p.input = add_dram(cx, lay, "io.inputs_embeds", isa::Purpose::kIo, DType::kF16,
                       cx.o.chunk * in_stride, {cx.o.chunk, hidden}, true);
    p.nodes[static_cast<size_t>(p.embeds)].place =
        ValueLoc{p.input, 0, in_stride, hidden, DType::kF16};
  }
  plan_rope_inputs(cx, lay);
  plan_row_inputs(cx, lay, p.deepstack, &p.deepstack_bufs);
  const int32_t act = plan_activations(cx, lay);
  QBC_RETURN_IF_ERROR(check_views(cx));
  QBC_RETURN_IF_ERROR(plan_output(cx, lay));
  const int64_t scratch = plan_scratch(cx, lay);
  const int64_t base = align_up(lay.weights_top, 4096);
  const int64_t slot_bytes = align_up(lay.slot_top, 4096);
  for (int32_t bi : lay.slot_buffers) {
    DramBuffer& buf = p.buffers[static_cast<size_t>(bi)];
    buf.offset += base;
    buf.slot_stride = slot_bytes;
  }
  const auto bytes_of = [&](int32_t b) { return p.buffers[static_cast<size_t>(b)].bytes; };
  p.regions.kv = kv_bytes * cx.o.batch;
  p.regions.activations = bytes_of(act) * cx.o.batch;
  p.regions.scratch = (scratch > 0 ? bytes_of(p.scratch) : 0) * cx.o.batch;
  p.regions.io = ((p.input >= 0 ? bytes_of(p.input) : 0) + bytes_of(p.logits)) * cx.o.batch;
  for (int32_t b : p.feature_bufs) p.regions.io += bytes_of(b) * cx.o.batch;
  for (int32_t b : p.deepstack_bufs) p.regions.io += bytes_of(b) * cx.o.batch;
  if (p.cos_buf >= 0) p.regions.io += (bytes_of(p.cos_buf) + bytes_of(p.sin_buf)) * cx.o.batch;
  p.regions.reserve = cx.o.target.dram_reserve;
  return ok_status();
}

/// The bundle's DRAM side from the plan: its buffers, regions, io buffers and widths.
void emit_dram(Context& cx) {
  emit_buffers(cx.plan, &cx.b);
  cx.b.dram = cx.plan.regions;
  cx.b.input = cx.plan.input;
  cx.b.output = cx.plan.logits;
  cx.b.rope_inputs.cos = cx.plan.cos_buf;
  cx.b.rope_inputs.sin = cx.plan.sin_buf;
  cx.b.deepstack = cx.plan.deepstack_bufs;
  cx.b.vocab = cx.plan.nodes[static_cast<size_t>(cx.plan.output)].width;
  for (int32_t id : cx.plan.extra_outputs)
    cx.b.vocab += cx.plan.nodes[static_cast<size_t>(id)].width;
  if (!cx.plan.features()) {
    cx.b.hidden = cx.plan.nodes[static_cast<size_t>(cx.plan.embeds)].width;
    return;
  }
  cx.b.kind = isa::BundleKind::kFeatures;
  cx.b.output_stride = cx.plan.nodes[static_cast<size_t>(cx.plan.output)].place.stride;
  cx.b.output_rows = cx.plan.rows(static_cast<size_t>(cx.plan.output));
  for (size_t i = 0; i < cx.plan.feature_inputs.size(); ++i) {
    const NodePlan& np = cx.plan.nodes[static_cast<size_t>(cx.plan.feature_inputs[i])];
    cx.b.feature_inputs.push_back(
        isa::FeatureInput{np.name, cx.plan.feature_bufs[i], np.place.width, np.place.stride});
  }
}

/// plan-memory: the weight layout and the DRAM plan.
class PlanMemory final : public pass::Pass<Context> {
 public:
  std::string name() const override { return "plan-memory"; }
  pass::ResourceSet needs() const override { return Context::kTiles; }
  pass::ResourceSet provides() const override { return Context::kMemory; }
  StatusOr<bool> run(Context& cx) override {
    Layout lay;
    QBC_RETURN_IF_ERROR(layout_weights(cx, lay));
    QBC_RETURN_IF_ERROR(plan_dram(cx, lay));
    emit_dram(cx);
    cx.plan.placed = true;
    cx.have |= Context::kMemory;
    return true;  // every buffer is placed here
  }
};

/// check-fit: does the plan fit the device? Decided before any weight is read or program
/// lowered (kResourceExhausted with the table and the largest cache and batch that fit).
class CheckFit final : public pass::Pass<Context> {
 public:
  std::string name() const override { return "check-fit"; }
  pass::ResourceSet needs() const override { return Context::kMemory; }
  StatusOr<bool> run(Context& cx) override {
    QBC_RETURN_IF_ERROR(check_fit(cx.b, memory_report(cx.b)));
    cx.plan.fit_checked = true;  // P7's device bound holds from here on
    return false;                // a check: the tiles and places are unchanged
  }
};

}  // namespace

void emit_buffers(const Plan& plan, isa::Bundle* b) {
  for (const DramBuffer& d : plan.buffers) {
    isa::Buffer buf;
    buf.name = d.name;
    buf.space = isa::Space::kDram;
    buf.purpose = d.purpose;
    buf.dtype = d.dtype;
    buf.offset = d.offset;
    buf.bytes = d.bytes;
    buf.slot_stride = d.slot_stride;
    buf.shape = d.shape;
    buf.block = d.block;
    b->buffers.push_back(std::move(buf));
  }
}

PassPtr make_plan_memory() { return std::make_unique<PlanMemory>(); }
PassPtr make_check_fit() { return std::make_unique<CheckFit>(); }

}  // namespace qbc::npu
