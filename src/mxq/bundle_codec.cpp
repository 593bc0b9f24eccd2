// isa::Bundle <-> MXQ protobuf messages (see qbc/mxq/bundle_codec.h).
#include "qbc/mxq/bundle_codec.h"

#include <type_traits>

#include "qbc/isa/verify.h"

namespace qbc::mxq {
namespace {

using isa::Expr;

// ---------------------------------------------------------------------------------------
// Encoding

void put(const Expr& e, pb::Expr* out) {
  for (const Expr::Node& n : e.nodes()) {
    pb::ExprNode* p = out->add_nodes();
    p->set_op(static_cast<uint32_t>(n.op));
    p->set_value(n.value);
    p->set_a(n.a);
    p->set_b(n.b);
  }
}

void put(const isa::Ref& r, pb::Ref* out) {
  out->set_buffer(r.buffer);
  if (r.buffer >= 0) put(r.offset, out->mutable_offset());
}

template <typename E>
uint32_t u(E e) {
  return static_cast<uint32_t>(e);
}

struct OpEncoder {
  pb::Instr* p;
  void operator()(const isa::Loop& o) {
    auto* m = p->mutable_loop();
    m->set_var(o.var);
    put(o.trip, m->mutable_trip());
    m->set_body(o.body);
  }
  void operator()(const isa::Dma& o) {
    auto* m = p->mutable_dma();
    put(o.dst, m->mutable_dst());
    put(o.src, m->mutable_src());
    put(o.rows, m->mutable_rows());
    m->set_row_bytes(o.row_bytes);
    m->set_dst_stride(o.dst_stride);
    m->set_src_stride(o.src_stride);
    m->set_ring_rows(o.ring_rows);
    m->set_ring_stride(o.ring_stride);
    put(o.ring_row0, m->mutable_ring_row0());
  }
  void operator()(const isa::Barrier& o) {
    auto* m = p->mutable_barrier();
    m->set_id(o.id);
    m->set_cores(o.cores);
  }
  void operator()(const isa::Quantize& o) {
    auto* m = p->mutable_quantize();
    put(o.x, m->mutable_x());
    put(o.codes, m->mutable_codes());
    put(o.scale, m->mutable_scale());
    put(o.zero, m->mutable_zero());
    put(o.rows, m->mutable_rows());
    m->set_k(o.k);
    m->set_bits(o.bits);
    m->set_mode(u(o.mode));
    m->set_static_scale(o.static_scale);
    m->set_static_zero(o.static_zero);
  }
  void operator()(const isa::MatMul& o) {
    auto* m = p->mutable_matmul();
    put(o.x, m->mutable_x());
    put(o.xzero, m->mutable_xzero());
    put(o.w, m->mutable_w());
    put(o.wzero, m->mutable_wzero());
    put(o.acc, m->mutable_acc());
    put(o.rows, m->mutable_rows());
    m->set_n(o.n);
    m->set_kt(o.kt);
    m->set_ldx(o.ldx);
    m->set_group(o.group);
    m->set_xtype(u(o.xtype));
    m->set_wtype(u(o.wtype));
    m->set_acctype(u(o.acctype));
    m->set_accumulate(o.accumulate);
  }
  void operator()(const isa::Requant& o) {
    auto* m = p->mutable_requant();
    put(o.acc, m->mutable_acc());
    put(o.xscale, m->mutable_xscale());
    put(o.wscale, m->mutable_wscale());
    put(o.fsum, m->mutable_fsum());
    put(o.bias, m->mutable_bias());
    put(o.y, m->mutable_y());
    put(o.rows, m->mutable_rows());
    m->set_n(o.n);
    m->set_gt(o.gt);
    m->set_ws_stride(o.ws_stride);
    m->set_ldy(o.ldy);
    m->set_acctype(u(o.acctype));
    m->set_ytype(u(o.ytype));
    m->set_first(o.first);
    m->set_last(o.last);
  }
  void operator()(const isa::RmsNorm& o) {
    auto* m = p->mutable_rms_norm();
    put(o.x, m->mutable_x());
    put(o.weight, m->mutable_weight());
    put(o.y, m->mutable_y());
    put(o.rows, m->mutable_rows());
    m->set_width(o.width);
    m->set_group(o.group);
    m->set_eps(o.eps);
    m->set_unit_offset(o.unit_offset);
  }
  void operator()(const isa::Rope& o) {
    auto* m = p->mutable_rope();
    put(o.x, m->mutable_x());
    put(o.y, m->mutable_y());
    put(o.rows, m->mutable_rows());
    put(o.pos0, m->mutable_pos0());
    put(o.freq_pos, m->mutable_freq_pos());
    m->set_rope(o.rope);
  }
  void operator()(const isa::Eltwise& o) {
    auto* m = p->mutable_eltwise();
    m->set_op(u(o.op));
    put(o.a, m->mutable_a());
    put(o.b, m->mutable_b());
    put(o.y, m->mutable_y());
    put(o.rows, m->mutable_rows());
    m->set_width(o.width);
    m->set_factor(o.factor);
    m->set_type(u(o.type));
  }
  void operator()(const isa::KvQuant& o) {
    auto* m = p->mutable_kv_quant();
    put(o.k, m->mutable_k());
    put(o.v, m->mutable_v());
    put(o.kcodes, m->mutable_kcodes());
    put(o.vcodes, m->mutable_vcodes());
    put(o.params, m->mutable_params());
    put(o.rows, m->mutable_rows());
    put(o.pos0, m->mutable_pos0());
    m->set_attn(o.attn);
  }
  void operator()(const isa::QueryPrep& o) {
    auto* m = p->mutable_query_prep();
    put(o.q, m->mutable_q());
    put(o.params, m->mutable_params());
    put(o.qcodes, m->mutable_qcodes());
    put(o.mq, m->mutable_mq());
    put(o.rows, m->mutable_rows());
    m->set_kv_head(o.kv_head);
    m->set_attn(o.attn);
  }
  void operator()(const isa::QkScores& o) {
    auto* m = p->mutable_qk_scores();
    put(o.qcodes, m->mutable_qcodes());
    put(o.mq, m->mutable_mq());
    put(o.q, m->mutable_q());
    put(o.kcodes, m->mutable_kcodes());
    put(o.params, m->mutable_params());
    put(o.scores, m->mutable_scores());
    put(o.rowmax, m->mutable_rowmax());
    put(o.rows, m->mutable_rows());
    put(o.qpos0, m->mutable_qpos0());
    put(o.kpos0, m->mutable_kpos0());
    m->set_bc(o.bc);
    m->set_kv_head(o.kv_head);
    m->set_max_mode(u(o.max_mode));
    m->set_attn(o.attn);
  }
  void operator()(const isa::ExpAccum& o) {
    auto* m = p->mutable_exp_accum();
    put(o.scores, m->mutable_scores());
    put(o.rowmax, m->mutable_rowmax());
    put(o.vcodes, m->mutable_vcodes());
    put(o.esum, m->mutable_esum());
    put(o.acc, m->mutable_acc());
    put(o.rows, m->mutable_rows());
    m->set_bc(o.bc);
    m->set_first(o.first);
    m->set_attn(o.attn);
  }
  void operator()(const isa::Merge& o) {
    auto* m = p->mutable_merge();
    m->set_op(u(o.op));
    put(o.parts, m->mutable_parts());
    put(o.out, m->mutable_out());
    m->set_parts_count(o.parts_count);
    m->set_count(o.count);
    m->set_part_stride(o.part_stride);
  }
  void operator()(const isa::AttnOut& o) {
    auto* m = p->mutable_attn_out();
    put(o.acc, m->mutable_acc());
    put(o.esum, m->mutable_esum());
    put(o.params, m->mutable_params());
    put(o.y, m->mutable_y());
    put(o.rows, m->mutable_rows());
    m->set_kv_head(o.kv_head);
    m->set_attn(o.attn);
  }
  void operator()(const isa::Fill& o) {
    auto* m = p->mutable_fill();
    put(o.y, m->mutable_y());
    put(o.count, m->mutable_count());
    m->set_type(u(o.type));
    m->set_value(o.value);
  }
};

void put_program_desc(const isa::Program& p, pb::ProgramDesc* out) {
  out->set_phase(u(p.phase));
  out->set_max_seq(p.max_seq);
  for (const isa::CoreProgram& c : p.cores) out->add_cores(c.core);
}

// ---------------------------------------------------------------------------------------
// Decoding

/// Decoding context: the location prefix and the first error.
struct Reader {
  std::string where;
  Status status;
  bool fail(const std::string& field, const std::string& what) {
    if (status.ok()) status = data_loss(where, ": ", field, ": ", what);
    return false;
  }
  template <typename E>
  bool en(uint32_t v, uint32_t count, const char* field, E* out) {
    if (v >= count) return fail(field, "enum value " + std::to_string(v) + " is not defined");
    *out = static_cast<E>(v);
    return true;
  }
  bool expr(const pb::Expr& e, const char* field, Expr* out) {
    if (e.nodes_size() == 0) return fail(field, "empty expression");
    if (static_cast<size_t>(e.nodes_size()) > Expr::kMaxNodes)
      return fail(field, "expression of " + std::to_string(e.nodes_size()) + " nodes");
    std::vector<Expr::Node> nodes;
    nodes.reserve(static_cast<size_t>(e.nodes_size()));
    for (const pb::ExprNode& n : e.nodes()) {
      if (n.op() > static_cast<uint32_t>(Expr::Op::kMax))
        return fail(field, "expression op " + std::to_string(n.op()) + " is not defined");
      nodes.push_back(Expr::Node{static_cast<Expr::Op>(n.op()), n.value(), n.a(), n.b()});
    }
    if (!Expr::from_nodes(std::move(nodes), out))
      return fail(field,
                  "malformed expression (unknown symbol, negative loop variable or an "
                  "operand that is not an earlier node)");
    return true;
  }
  bool ref(const pb::Ref& r, const char* field, isa::Ref* out) {
    out->buffer = r.buffer() < 0 ? -1 : r.buffer();
    if (out->buffer < 0) {
      out->offset = Expr(0);
      return true;
    }
    return expr(r.offset(), field, &out->offset);
  }
};

constexpr uint32_t kDTypes = 8, kSpaces = 2, kPurposes = 6, kQueues = 3, kQuantModes = 4,
                   kEltOps = 5, kMaxModes = 3, kMergeOps = 2, kPhases = 2, kSchemes = 4;

bool decode_instr(const pb::Instr& p, Reader& r, isa::Instr* out) {
  if (!r.en(p.queue(), kQueues, "queue", &out->queue)) return false;
  if (p.wait() >= (1u << isa::kNumChannels) || p.signal() >= (1u << isa::kNumChannels))
    return r.fail("wait/signal",
                  "token channel bits past channel " + std::to_string(isa::kNumChannels - 1));
  out->wait = static_cast<uint8_t>(p.wait());
  out->signal = static_cast<uint8_t>(p.signal());
  out->node = p.node();
  out->pass = p.pass();
  switch (p.op_case()) {
    case pb::Instr::kLoop: {
      isa::Loop o;
      const auto& m = p.loop();
      o.var = m.var();
      o.body = m.body();
      if (!r.expr(m.trip(), "loop.trip", &o.trip)) return false;
      out->op = o;
      return true;
    }
    case pb::Instr::kDma: {
      isa::Dma o;
      const auto& m = p.dma();
      o.row_bytes = m.row_bytes();
      o.dst_stride = m.dst_stride();
      o.src_stride = m.src_stride();
      o.ring_rows = m.ring_rows();
      o.ring_stride = m.ring_stride();
      if (!r.ref(m.dst(), "dma.dst", &o.dst) || !r.ref(m.src(), "dma.src", &o.src) ||
          !r.expr(m.rows(), "dma.rows", &o.rows) ||
          !r.expr(m.ring_row0(), "dma.ring_row0", &o.ring_row0))
        return false;
      out->op = o;
      return true;
    }
    case pb::Instr::kBarrier: {
      out->op = isa::Barrier{p.barrier().id(), p.barrier().cores()};
      return true;
    }
    case pb::Instr::kQuantize: {
      isa::Quantize o;
      const auto& m = p.quantize();
      o.k = m.k();
      o.bits = m.bits();
      o.static_scale = m.static_scale();
      o.static_zero = m.static_zero();
      if (!r.ref(m.x(), "quantize.x", &o.x) || !r.ref(m.codes(), "quantize.codes", &o.codes) ||
          !r.ref(m.scale(), "quantize.scale", &o.scale) ||
          !r.ref(m.zero(), "quantize.zero", &o.zero) ||
          !r.expr(m.rows(), "quantize.rows", &o.rows) ||
          !r.en(m.mode(), kQuantModes, "quantize.mode", &o.mode))
        return false;
      out->op = o;
      return true;
    }
    case pb::Instr::kMatmul: {
      isa::MatMul o;
      const auto& m = p.matmul();
      o.n = m.n();
      o.kt = m.kt();
      o.ldx = m.ldx();
      o.group = m.group();
      o.accumulate = m.accumulate();
      if (!r.ref(m.x(), "matmul.x", &o.x) || !r.ref(m.xzero(), "matmul.xzero", &o.xzero) ||
          !r.ref(m.w(), "matmul.w", &o.w) || !r.ref(m.wzero(), "matmul.wzero", &o.wzero) ||
          !r.ref(m.acc(), "matmul.acc", &o.acc) || !r.expr(m.rows(), "matmul.rows", &o.rows) ||
          !r.en(m.xtype(), kDTypes, "matmul.xtype", &o.xtype) ||
          !r.en(m.wtype(), kDTypes, "matmul.wtype", &o.wtype) ||
          !r.en(m.acctype(), kDTypes, "matmul.acctype", &o.acctype))
        return false;
      out->op = o;
      return true;
    }
    case pb::Instr::kRequant: {
      isa::Requant o;
      const auto& m = p.requant();
      o.n = m.n();
      o.gt = m.gt();
      o.ws_stride = m.ws_stride();
      o.ldy = m.ldy();
      o.first = m.first();
      o.last = m.last();
      if (!r.ref(m.acc(), "requant.acc", &o.acc) ||
          !r.ref(m.xscale(), "requant.xscale", &o.xscale) ||
          !r.ref(m.wscale(), "requant.wscale", &o.wscale) ||
          !r.ref(m.fsum(), "requant.fsum", &o.fsum) || !r.ref(m.bias(), "requant.bias", &o.bias) ||
          !r.ref(m.y(), "requant.y", &o.y) || !r.expr(m.rows(), "requant.rows", &o.rows) ||
          !r.en(m.acctype(), kDTypes, "requant.acctype", &o.acctype) ||
          !r.en(m.ytype(), kDTypes, "requant.ytype", &o.ytype))
        return false;
      out->op = o;
      return true;
    }
    case pb::Instr::kRmsNorm: {
      isa::RmsNorm o;
      const auto& m = p.rms_norm();
      o.width = m.width();
      o.group = m.group();
      o.eps = m.eps();
      o.unit_offset = m.unit_offset();
      if (!r.ref(m.x(), "rms_norm.x", &o.x) || !r.ref(m.weight(), "rms_norm.weight", &o.weight) ||
          !r.ref(m.y(), "rms_norm.y", &o.y) || !r.expr(m.rows(), "rms_norm.rows", &o.rows))
        return false;
      out->op = o;
      return true;
    }
    case pb::Instr::kRope: {
      isa::Rope o;
      const auto& m = p.rope();
      o.rope = m.rope();
      if (!r.ref(m.x(), "rope.x", &o.x) || !r.ref(m.y(), "rope.y", &o.y) ||
          !r.expr(m.rows(), "rope.rows", &o.rows) || !r.expr(m.pos0(), "rope.pos0", &o.pos0) ||
          !r.expr(m.freq_pos(), "rope.freq_pos", &o.freq_pos))
        return false;
      out->op = o;
      return true;
    }
    case pb::Instr::kEltwise: {
      isa::Eltwise o;
      const auto& m = p.eltwise();
      o.width = m.width();
      o.factor = m.factor();
      if (!r.en(m.op(), kEltOps, "eltwise.op", &o.op) || !r.ref(m.a(), "eltwise.a", &o.a) ||
          !r.ref(m.b(), "eltwise.b", &o.b) || !r.ref(m.y(), "eltwise.y", &o.y) ||
          !r.expr(m.rows(), "eltwise.rows", &o.rows) ||
          !r.en(m.type(), kDTypes, "eltwise.type", &o.type))
        return false;
      out->op = o;
      return true;
    }
    case pb::Instr::kKvQuant: {
      isa::KvQuant o;
      const auto& m = p.kv_quant();
      o.attn = m.attn();
      if (!r.ref(m.k(), "kv_quant.k", &o.k) || !r.ref(m.v(), "kv_quant.v", &o.v) ||
          !r.ref(m.kcodes(), "kv_quant.kcodes", &o.kcodes) ||
          !r.ref(m.vcodes(), "kv_quant.vcodes", &o.vcodes) ||
          !r.ref(m.params(), "kv_quant.params", &o.params) ||
          !r.expr(m.rows(), "kv_quant.rows", &o.rows) ||
          !r.expr(m.pos0(), "kv_quant.pos0", &o.pos0))
        return false;
      out->op = o;
      return true;
    }
    case pb::Instr::kQueryPrep: {
      isa::QueryPrep o;
      const auto& m = p.query_prep();
      o.kv_head = m.kv_head();
      o.attn = m.attn();
      if (!r.ref(m.q(), "query_prep.q", &o.q) ||
          !r.ref(m.params(), "query_prep.params", &o.params) ||
          !r.ref(m.qcodes(), "query_prep.qcodes", &o.qcodes) ||
          !r.ref(m.mq(), "query_prep.mq", &o.mq) || !r.expr(m.rows(), "query_prep.rows", &o.rows))
        return false;
      out->op = o;
      return true;
    }
    case pb::Instr::kQkScores: {
      isa::QkScores o;
      const auto& m = p.qk_scores();
      o.bc = m.bc();
      o.kv_head = m.kv_head();
      o.attn = m.attn();
      if (!r.ref(m.qcodes(), "qk_scores.qcodes", &o.qcodes) ||
          !r.ref(m.mq(), "qk_scores.mq", &o.mq) || !r.ref(m.q(), "qk_scores.q", &o.q) ||
          !r.ref(m.kcodes(), "qk_scores.kcodes", &o.kcodes) ||
          !r.ref(m.params(), "qk_scores.params", &o.params) ||
          !r.ref(m.scores(), "qk_scores.scores", &o.scores) ||
          !r.ref(m.rowmax(), "qk_scores.rowmax", &o.rowmax) ||
          !r.expr(m.rows(), "qk_scores.rows", &o.rows) ||
          !r.expr(m.qpos0(), "qk_scores.qpos0", &o.qpos0) ||
          !r.expr(m.kpos0(), "qk_scores.kpos0", &o.kpos0) ||
          !r.en(m.max_mode(), kMaxModes, "qk_scores.max_mode", &o.max_mode))
        return false;
      out->op = o;
      return true;
    }
    case pb::Instr::kExpAccum: {
      isa::ExpAccum o;
      const auto& m = p.exp_accum();
      o.bc = m.bc();
      o.first = m.first();
      o.attn = m.attn();
      if (!r.ref(m.scores(), "exp_accum.scores", &o.scores) ||
          !r.ref(m.rowmax(), "exp_accum.rowmax", &o.rowmax) ||
          !r.ref(m.vcodes(), "exp_accum.vcodes", &o.vcodes) ||
          !r.ref(m.esum(), "exp_accum.esum", &o.esum) || !r.ref(m.acc(), "exp_accum.acc", &o.acc) ||
          !r.expr(m.rows(), "exp_accum.rows", &o.rows))
        return false;
      out->op = o;
      return true;
    }
    case pb::Instr::kMerge: {
      isa::Merge o;
      const auto& m = p.merge();
      o.parts_count = m.parts_count();
      o.count = m.count();
      o.part_stride = m.part_stride();
      if (!r.en(m.op(), kMergeOps, "merge.op", &o.op) ||
          !r.ref(m.parts(), "merge.parts", &o.parts) || !r.ref(m.out(), "merge.out", &o.out))
        return false;
      out->op = o;
      return true;
    }
    case pb::Instr::kAttnOut: {
      isa::AttnOut o;
      const auto& m = p.attn_out();
      o.kv_head = m.kv_head();
      o.attn = m.attn();
      if (!r.ref(m.acc(), "attn_out.acc", &o.acc) || !r.ref(m.esum(), "attn_out.esum", &o.esum) ||
          !r.ref(m.params(), "attn_out.params", &o.params) || !r.ref(m.y(), "attn_out.y", &o.y) ||
          !r.expr(m.rows(), "attn_out.rows", &o.rows))
        return false;
      out->op = o;
      return true;
    }
    case pb::Instr::kFill: {
      isa::Fill o;
      const auto& m = p.fill();
      o.value = m.value();
      if (!r.ref(m.y(), "fill.y", &o.y) || !r.expr(m.count(), "fill.count", &o.count) ||
          !r.en(m.type(), kDTypes, "fill.type", &o.type))
        return false;
      out->op = o;
      return true;
    }
    case pb::Instr::OP_NOT_SET:
      break;
  }
  return r.fail("op", "no op (or an op this reader does not know)");
}

Status decode_stream(const google::protobuf::RepeatedPtrField<pb::Instr>& in, Reader& r,
                     std::vector<isa::Instr>* out) {
  out->clear();
  out->reserve(static_cast<size_t>(in.size()));
  const std::string base = r.where;
  for (int i = 0; i < in.size(); ++i) {
    r.where = base + ": instruction " + std::to_string(i);
    isa::Instr instr;
    if (!decode_instr(in.Get(i), r, &instr)) return r.status;
    out->push_back(std::move(instr));
  }
  r.where = base;
  return ok_status();
}

Status count_ok(int64_t n, const std::string& where, const char* what) {
  if (n < 0 || n > kMaxTableEntries)
    return data_loss(where, ": ", n, " ", what, " (at most ", kMaxTableEntries, ")");
  return ok_status();
}

}  // namespace

pb::Layout encode_layout(const isa::Bundle& b) {
  pb::Layout l;
  l.set_target(b.target);
  l.set_target_cores(b.target_cores);
  l.set_target_clusters(b.target_clusters);
  l.set_sram_bytes(b.sram_bytes);
  l.set_dram_bytes(b.dram_bytes);
  l.set_dma_align(b.dma_align);
  l.set_hidden(b.hidden);
  l.set_vocab(b.vocab);
  l.set_max_cache(b.max_cache);
  l.set_chunk(b.chunk);
  l.set_batch(b.batch);
  l.set_embed_rows(b.embed_rows);
  for (const isa::Buffer& x : b.buffers) {
    pb::Buffer* p = l.add_buffers();
    p->set_name(x.name);
    p->set_space(u(x.space));
    p->set_core(x.core);
    p->set_purpose(u(x.purpose));
    p->set_dtype(u(x.dtype));
    p->set_offset(x.offset);
    p->set_bytes(x.bytes);
    p->set_slot_stride(x.slot_stride);
    for (int64_t d : x.shape) p->add_shape(d);
    p->set_block(x.block);
  }
  for (const isa::AttnDesc& a : b.attentions) {
    pb::AttnDesc* p = l.add_attentions();
    p->set_heads(a.heads);
    p->set_kv_heads(a.kv_heads);
    p->set_head_dim(a.head_dim);
    p->set_window(a.window);
    p->set_capacity(a.capacity);
    p->set_scale(a.scale);
    p->set_softcap(a.softcap);
    p->set_k_bits(a.k_bits);
    p->set_v_bits(a.v_bits);
    p->set_p_bits(a.p_bits);
    p->set_q_dynamic(a.q_dynamic);
    p->set_rotating(a.rotating);
    p->set_k_rope(a.k_rope);
  }
  for (const isa::RopeDesc& r : b.ropes) {
    pb::RopeDesc* p = l.add_ropes();
    p->set_heads(r.heads);
    p->set_head_dim(r.head_dim);
    p->set_rotary_dim(r.rotary_dim);
    for (double f : r.inv_freq) p->add_inv_freq(f);
    for (double f : r.long_inv_freq) p->add_long_inv_freq(f);
    p->set_attention_factor(r.attention_factor);
    p->set_dynamic_factor(r.dynamic_factor);
    p->set_theta(r.theta);
    p->set_original_max_positions(r.original_max_positions);
  }
  for (const isa::Mode& m : b.modes) {
    pb::ModeDesc* p = l.add_modes();
    p->set_scheme(u(m.scheme));
    p->set_cores_per_instance(m.cores_per_instance);
    p->set_instances(m.instances);
    put_program_desc(m.prefill, p->mutable_prefill());
    put_program_desc(m.decode, p->mutable_decode());
  }
  l.set_input(b.input);
  l.set_output(b.output);
  l.set_image_base(b.image_base);
  l.set_image_bytes(b.image_size());
  pb::DramPlan* d = l.mutable_dram();
  d->set_weights(b.dram.weights);
  d->set_kv(b.dram.kv);
  d->set_activations(b.dram.activations);
  d->set_scratch(b.dram.scratch);
  d->set_io(b.dram.io);
  d->set_reserve(b.dram.reserve);
  l.set_nodes(static_cast<int32_t>(b.nodes.size()));
  l.set_passes(static_cast<int32_t>(b.passes.size()));
  return l;
}

StatusOr<pb::CoreCode> encode_code(const isa::Bundle& b, size_t mode, size_t core) {
  const isa::Mode& m = b.modes.at(mode);
  if (m.prefill.cores.size() != m.decode.cores.size())
    return invalid_argument("mode ", isa::scheme_name(m.scheme), ": prefill has ",
                            m.prefill.cores.size(), " streams, decode ", m.decode.cores.size());
  pb::CoreCode c;
  c.set_scheme(u(m.scheme));
  c.set_core(static_cast<int32_t>(core));
  for (int phase = 0; phase < 2; ++phase) {
    const isa::Program& p = phase == 0 ? m.prefill : m.decode;
    auto* out = phase == 0 ? c.mutable_prefill() : c.mutable_decode();
    out->Reserve(static_cast<int>(p.cores.at(core).code.size()));
    for (const isa::Instr& in : p.cores.at(core).code) {
      pb::Instr* pi = out->Add();
      std::visit(OpEncoder{pi}, in.op);
      pi->set_queue(u(in.queue));
      pi->set_wait(in.wait);
      pi->set_signal(in.signal);
      pi->set_node(in.node);
      pi->set_pass(in.pass);
    }
  }
  return c;
}

pb::DebugMap encode_debug(const isa::Bundle& b) {
  pb::DebugMap d;
  for (const std::string& n : b.nodes) d.add_nodes(n);
  for (const std::string& p : b.passes) d.add_passes(p);
  return d;
}

Status decode_layout(const pb::Layout& l, const std::string& where, isa::Bundle* b) {
  Reader r{where, {}};
  b->target = l.target();
  b->target_cores = l.target_cores();
  b->sram_bytes = l.sram_bytes();
  b->dram_bytes = l.dram_bytes();
  b->dma_align = l.dma_align();
  b->hidden = l.hidden();
  b->vocab = l.vocab();
  b->max_cache = l.max_cache();
  b->chunk = l.chunk();
  b->batch = l.batch();
  b->embed_rows = l.embed_rows();
  if (b->target_cores < 1 || b->target_cores > 1024)
    return data_loss(where, ": target_cores ", b->target_cores);
  b->target_clusters = l.target_clusters() == 0 ? 1 : l.target_clusters();
  if (b->target_clusters < 1 || b->target_cores % b->target_clusters != 0) {
    return data_loss(where, ": target_clusters ", l.target_clusters(), " does not divide the ",
                     b->target_cores, " cores");
  }
  QBC_RETURN_IF_ERROR(count_ok(l.buffers_size(), where, "buffers"));
  b->buffers.clear();
  for (int i = 0; i < l.buffers_size(); ++i) {
    const pb::Buffer& p = l.buffers(i);
    isa::Buffer x;
    r.where = where + ": buffer " + std::to_string(i);
    x.name = p.name();
    x.core = p.core();
    x.offset = p.offset();
    x.bytes = p.bytes();
    x.slot_stride = p.slot_stride();
    x.block = p.block();
    if (p.shape_size() > 8) return data_loss(r.where, ": shape of ", p.shape_size(), " dims");
    x.shape.assign(p.shape().begin(), p.shape().end());
    if (!r.en(p.space(), kSpaces, "space", &x.space) ||
        !r.en(p.purpose(), kPurposes, "purpose", &x.purpose) ||
        !r.en(p.dtype(), kDTypes, "dtype", &x.dtype))
      return r.status;
    b->buffers.push_back(std::move(x));
  }
  QBC_RETURN_IF_ERROR(count_ok(l.attentions_size(), where, "attentions"));
  b->attentions.clear();
  for (const pb::AttnDesc& p : l.attentions()) {
    isa::AttnDesc a;
    a.heads = p.heads();
    a.kv_heads = p.kv_heads();
    a.head_dim = p.head_dim();
    a.window = p.window();
    a.capacity = p.capacity();
    a.scale = p.scale();
    a.softcap = p.softcap();
    a.k_bits = p.k_bits();
    a.v_bits = p.v_bits();
    a.p_bits = p.p_bits();
    a.q_dynamic = p.q_dynamic();
    a.rotating = p.rotating();
    a.k_rope = p.k_rope();
    b->attentions.push_back(a);
  }
  QBC_RETURN_IF_ERROR(count_ok(l.ropes_size(), where, "ropes"));
  b->ropes.clear();
  for (const pb::RopeDesc& p : l.ropes()) {
    isa::RopeDesc x;
    x.heads = p.heads();
    x.head_dim = p.head_dim();
    x.rotary_dim = p.rotary_dim();
    x.inv_freq.assign(p.inv_freq().begin(), p.inv_freq().end());
    x.long_inv_freq.assign(p.long_inv_freq().begin(), p.long_inv_freq().end());
    x.attention_factor = p.attention_factor();
    x.dynamic_factor = p.dynamic_factor();
    x.theta = p.theta();
    x.original_max_positions = p.original_max_positions();
    b->ropes.push_back(std::move(x));
  }
  if (l.modes_size() < 1 || l.modes_size() > 16)
    return data_loss(where, ": ", l.modes_size(), " modes (1..16)");
  b->modes.clear();
  for (int i = 0; i < l.modes_size(); ++i) {
    const pb::ModeDesc& p = l.modes(i);
    r.where = where + ": mode " + std::to_string(i);
    isa::Mode m;
    if (!r.en(p.scheme(), kSchemes, "scheme", &m.scheme)) return r.status;
    m.cores_per_instance = p.cores_per_instance();
    m.instances = p.instances();
    if (m.cores_per_instance < 1 || m.cores_per_instance > b->target_cores || m.instances < 1 ||
        m.instances > 1024)
      return data_loss(r.where, ": ", m.cores_per_instance, " cores per instance, ", m.instances,
                       " instances on a ", b->target_cores, "-core target");
    for (int phase = 0; phase < 2; ++phase) {
      const pb::ProgramDesc& d = phase == 0 ? p.prefill() : p.decode();
      isa::Program& prog = phase == 0 ? m.prefill : m.decode;
      if (!r.en(d.phase(), kPhases, "phase", &prog.phase)) return r.status;
      if (static_cast<int>(prog.phase) != (phase == 0 ? 0 : 1))
        return data_loss(r.where, ": phase ", d.phase(), " in the ",
                         phase == 0 ? "prefill" : "decode", " slot");
      prog.max_seq = d.max_seq();
      if (d.cores_size() != m.cores_per_instance)
        return data_loss(r.where, ": ", d.cores_size(), " streams for ", m.cores_per_instance,
                         " cores per instance");
      for (int32_t c : d.cores()) prog.cores.push_back(isa::CoreProgram{c, {}});
    }
    b->modes.push_back(std::move(m));
  }
  b->input = l.input();
  b->output = l.output();
  b->image_base = l.image_base();
  if (l.image_bytes() < 0 || l.image_bytes() > (int64_t{1} << 40))
    return data_loss(where, ": weight image of ", l.image_bytes(), " bytes");
  const pb::DramPlan& d = l.dram();
  b->dram = isa::DramPlan{d.weights(), d.kv(), d.activations(), d.scratch(), d.io(), d.reserve()};
  if (l.nodes() < 0 || l.passes() < 0) return data_loss(where, ": negative debug counts");
  return ok_status();
}

Status decode_code(const pb::CoreCode& c, size_t mode, size_t core, const std::string& where,
                   isa::Bundle* b) {
  if (mode >= b->modes.size())
    return data_loss(where, ": mode ", mode, " (the layout has ", b->modes.size(), ")");
  isa::Mode& m = b->modes[mode];
  if (c.scheme() != static_cast<uint32_t>(m.scheme))
    return data_loss(where, ": code of scheme ", c.scheme(), " in the section of mode ", mode, " (",
                     isa::scheme_name(m.scheme), ")");
  if (c.core() < 0 || static_cast<size_t>(c.core()) != core || core >= m.prefill.cores.size())
    return data_loss(where, ": stream ", c.core(), " in the section of core ", core);
  if (c.prefill_size() > isa::kMaxStreamInstrs || c.decode_size() > isa::kMaxStreamInstrs)
    return data_loss(where, ": more than ", isa::kMaxStreamInstrs, " instructions");
  Reader r{where, {}};
  r.where = where + ": prefill";
  QBC_RETURN_IF_ERROR(decode_stream(c.prefill(), r, &m.prefill.cores[core].code));
  r.where = where + ": decode";
  return decode_stream(c.decode(), r, &m.decode.cores[core].code);
}

Status decode_debug(const pb::DebugMap& d, const std::string& where, isa::Bundle* b) {
  QBC_RETURN_IF_ERROR(count_ok(d.nodes_size(), where, "node names"));
  QBC_RETURN_IF_ERROR(count_ok(d.passes_size(), where, "pass names"));
  b->nodes.assign(d.nodes().begin(), d.nodes().end());
  b->passes.assign(d.passes().begin(), d.passes().end());
  return ok_status();
}

}  // namespace qbc::mxq
