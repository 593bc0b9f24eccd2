// The plan as text (qbc/npu/plan.h print_plan): what a --dump-after of plan-tiles,
// plan-memory, check-fit or fill-weights writes. Every field of the Plan, in a fixed order:
// the header; `tiles`: per node its kind and tiles, its stages and, once placed, its value's
// place; `stages`: each SRAM stage's planned and used bytes; `dram`: each DRAM buffer
// (region, offset, bytes, type, shape, per-slot stride, block, and `grows` for a KV buffer
// whose capacity is the cache); the io buffers and the regions. One line per node, stage
// and buffer, in index order, so the text is deterministic.
#include <iomanip>
#include <sstream>
#include <string>

#include "backend.h"
#include "qbc/npu/plan.h"

namespace qbc::npu {
namespace {

const char* kind_name(NodeKind k) {
  switch (k) {
    case NodeKind::kInput:
      return "input";
    case NodeKind::kSlice:
      return "slice";
    case NodeKind::kLinear:
      return "linear";
    case NodeKind::kAttention:
      return "attention";
    case NodeKind::kRows:
      return "rows";
  }
  return "?";
}

std::string list(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i > 0 ? " " : "") + std::to_string(v[i]);
  return out + "]";
}

void print_linear(const LinearPlan& li, std::ostringstream& os) {
  os << " n " << li.n << " k " << li.k << " w" << li.w_bits << " x" << li.in_bits << " group "
     << li.group << " groups " << li.groups << " zero " << li.zero << (li.min ? " min 1" : "")
     << " bias " << li.bias << " out_fp16 " << li.out_fp16 << " mode "
     << isa::quant_mode_name(li.mode) << " in_scale " << std::setprecision(9) << li.in_scale
     << std::setprecision(6) << " in_zero " << li.in_zero << ": nt " << li.t.nt << " kt " << li.t.kt
     << " mt " << li.t.mt << " (" << li.ntiles << " x " << li.ktiles << " tiles, gt " << li.gt
     << ")";
  if (li.buf < 0) return;
  os << " buffer #" << li.buf << " w_bytes " << li.w_bytes << " ws_bytes " << li.ws_bytes
     << " wz_bytes " << li.wz_bytes << " w_off " << list(li.w_off) << " ws_off " << list(li.ws_off)
     << " wz_off " << list(li.wz_off);
  if (li.min) os << " wm_off " << list(li.wm_off);
  os << " b_off " << list(li.b_off);
}

void print_attention(const AttentionPlan& a, std::ostringstream& os) {
  os << " desc " << a.desc << " heads " << a.heads << "/" << a.kv_heads << " x " << a.head_dim
     << " window " << a.window << " capacity " << a.capacity << " k" << a.k_bits << " v" << a.v_bits
     << ": br " << a.t.br << " bc " << a.t.bc << " append rows " << a.append_mt << " params_bytes "
     << a.params_bytes << " krow " << a.krow << " vrow " << a.vrow;
  if (a.params >= 0)
    os << " params #" << a.params << " kcache #" << a.kcache << " vcache #" << a.vcache;
}

void print_node(const Plan& p, size_t i, std::ostringstream& os) {
  const NodePlan& n = p.nodes[i];
  os << "  %" << i << " " << n.name << " " << n.op << " " << kind_name(n.kind) << " width "
     << n.width;
  if (n.row_div != 1) os << " row_div " << n.row_div;
  if (n.kind == NodeKind::kLinear) print_linear(n.linear, os);
  if (n.kind == NodeKind::kLinear && n.has_second()) {  // bit.prefill / bit.decode
    os << "; " << isa::phase_name(n.second_for) << " image";
    print_linear(n.second, os);
  }
  if (n.kind == NodeKind::kAttention) print_attention(n.attention, os);
  if (n.kind == NodeKind::kRows) os << ": rows " << n.rows_mt;
  if (n.rope >= 0) os << " rope " << n.rope;
  if (n.norm_weight >= 0) os << " weight #" << n.norm_weight;
  if (n.stage >= 0) os << " stage " << n.stage;
  if (p.placed) {
    const ValueLoc& v = n.place;
    os << "; place";
    if (v.buf < 0) {
      os << " none";
    } else {
      os << " #" << v.buf << " col " << v.col << " stride " << v.stride << " width " << v.width
         << " " << isa::dtype_name(v.type);
    }
    if (n.alias >= 0) os << " alias %" << n.alias;
    os << " last_use " << n.last_use;
  }
  os << "\n";
}

void print_buffer(const Plan& p, size_t i, std::ostringstream& os) {
  const DramBuffer& b = p.buffers[i];
  os << "  #" << i << " " << b.name << ": " << isa::purpose_name(b.purpose) << " at " << b.offset
     << ", " << b.bytes << " bytes, " << isa::dtype_name(b.dtype) << " " << list(b.shape);
  if (b.slot_stride > 0) os << ", per slot (stride " << b.slot_stride << ")";
  if (b.block >= 0) os << ", block " << b.block;
  if (b.purpose == isa::Purpose::kKv)
    os << (b.grows ? ", grows (capacity the cache)" : ", fixed (capacity a ring)");
  os << "\n";
}

}  // namespace

std::string print_plan(const Plan& p) {
  std::ostringstream os;
  os << "plan of graph '" << p.graph << "' for target '" << p.target << "': cores " << p.cores
     << ", SRAM " << p.sram_budget << " bytes per core, DRAM " << p.dram_bytes << " (reserve "
     << p.dram_reserve << "), align " << p.dma_align << "; cache " << p.max_cache << ", chunk "
     << p.chunk << ", batch " << p.batch << "\n";
  os << "planned:" << (p.tiled ? " tiles" : "") << (p.placed ? " places" : "")
     << (p.fit_checked ? " fit" : "") << "; inputs %" << p.embeds << " positions %" << p.positions;
  if (p.rope_cos >= 0) os << " rope_cos %" << p.rope_cos << " rope_sin %" << p.rope_sin;
  for (int32_t id : p.deepstack) os << " deepstack %" << id;
  os << ", output %" << p.output;
  for (int32_t id : p.extra_outputs) os << " %" << id;
  os << "\n";
  os << "tiles\n";
  for (size_t i = 0; i < p.nodes.size(); ++i) print_node(p, i, os);
  os << "stages\n";
  for (size_t i = 0; i < p.stages.size(); ++i) {
    const StagePlan& s = p.stages[i];
    os << "  s" << i << " %" << s.node << " " << s.name << ": planned " << s.planned << ", used "
       << s.used << " of " << p.sram_budget << " bytes\n";
  }
  if (!p.placed) return os.str();
  os << "dram\n";
  for (size_t i = 0; i < p.buffers.size(); ++i) print_buffer(p, i, os);
  os << "io: input #" << p.input << ", logits #" << p.logits << ", scratch #" << p.scratch;
  if (p.cos_buf >= 0) os << ", rope_cos #" << p.cos_buf << ", rope_sin #" << p.sin_buf;
  for (int32_t b : p.deepstack_bufs) os << ", deepstack #" << b;
  os << "\n";
  const isa::DramPlan& r = p.regions;
  os << "regions: weights " << r.weights << ", kv " << r.kv << ", activations " << r.activations
     << ", scratch " << r.scratch << ", io " << r.io << ", reserve " << r.reserve << " bytes\n";
  return os.str();
}

std::string plan_text(const Context& cx) {
  std::string out = print_plan(cx.plan);
  if ((cx.have & Context::kImage) != 0) {
    out += "image: " + std::to_string(cx.b.image.size()) + " bytes, embedding " +
           std::to_string(cx.b.embed_rows) + " rows" +
           (cx.b.image.empty() ? " (shapes only)" : "") + "\n";
  }
  return out;
}

}  // namespace qbc::npu
