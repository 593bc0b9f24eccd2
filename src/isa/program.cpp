// Names, sizes and access sets of the NPU program types (see qbc/isa/program.h).
#include "qbc/isa/program.h"

#include <type_traits>

namespace qbc::isa {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kI4:
      return "i4";
    case DType::kI8:
      return "i8";
    case DType::kU8:
      return "u8";
    case DType::kI16:
      return "i16";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kF16:
      return "f16";
    case DType::kF32:
      return "f32";
  }
  return "?";
}

int dtype_bits(DType t) {
  switch (t) {
    case DType::kI4:
      return 4;
    case DType::kI8:
    case DType::kU8:
      return 8;
    case DType::kI16:
    case DType::kF16:
      return 16;
    case DType::kI32:
    case DType::kF32:
      return 32;
    case DType::kI64:
      return 64;
  }
  return 8;
}

int64_t dtype_bytes(DType t, int64_t n) { return (n * dtype_bits(t) + 7) / 8; }

const char* purpose_name(Purpose p) {
  switch (p) {
    case Purpose::kWeights:
      return "weights";
    case Purpose::kKv:
      return "kv";
    case Purpose::kActivations:
      return "activations";
    case Purpose::kScratch:
      return "scratch";
    case Purpose::kIo:
      return "io";
    case Purpose::kSram:
      return "sram";
  }
  return "?";
}

const char* queue_name(Queue q) {
  switch (q) {
    case Queue::kLoad:
      return "ld";
    case Queue::kCompute:
      return "cmp";
    case Queue::kStore:
      return "st";
  }
  return "?";
}

namespace {
struct ChannelInfo {
  Queue from, to;
  const char* name;
};
constexpr ChannelInfo kChannels[kNumChannels] = {
    {Queue::kLoad, Queue::kCompute, "ld>cmp"},  {Queue::kCompute, Queue::kLoad, "cmp>ld"},
    {Queue::kCompute, Queue::kStore, "cmp>st"}, {Queue::kStore, Queue::kCompute, "st>cmp"},
    {Queue::kLoad, Queue::kStore, "ld>st"},     {Queue::kStore, Queue::kLoad, "st>ld"}};
}  // namespace

Queue channel_from(Channel c) { return kChannels[static_cast<int>(c)].from; }
Queue channel_to(Channel c) { return kChannels[static_cast<int>(c)].to; }
const char* channel_name(Channel c) { return kChannels[static_cast<int>(c)].name; }

const char* quant_mode_name(QuantMode m) {
  switch (m) {
    case QuantMode::kStaticSymmetric:
      return "static-sym";
    case QuantMode::kStaticAffine:
      return "static-affine";
    case QuantMode::kTokenSymmetric:
      return "token-sym";
    case QuantMode::kTokenAffine:
      return "token-affine";
  }
  return "?";
}

const char* elt_name(EltOp op) {
  switch (op) {
    case EltOp::kAdd:
      return "add";
    case EltOp::kSilu:
      return "silu_mul";
    case EltOp::kGelu:
      return "gelu_mul";
    case EltOp::kScale:
      return "scale";
    case EltOp::kSoftcap:
      return "softcap";
  }
  return "?";
}

const char* phase_name(Phase p) { return p == Phase::kPrefill ? "prefill" : "decode"; }

int64_t attn_params_floats(int64_t heads, int64_t kv_heads, int64_t head_dim) {
  return heads + 5 * kv_heads * head_dim;
}

const char* op_name(const Op& op) {
  static constexpr const char* kNames[] = {
      "loop",    "dma",      "barrier",    "quantize",  "matmul",    "requant", "rms_norm", "rope",
      "eltwise", "kv_quant", "query_prep", "qk_scores", "exp_accum", "merge",   "attn_out", "fill"};
  static_assert(std::variant_size_v<Op> == sizeof(kNames) / sizeof(kNames[0]));
  return kNames[op.index()];
}

DType code_type(int bits) { return bits == 4 ? DType::kI4 : bits == 16 ? DType::kI16 : DType::kI8; }

namespace {

struct AccessBuilder {
  const Bundle& b;
  std::vector<Access> out;
  void add(const Ref& r, const Expr& bytes, bool write) {
    if (r.valid()) out.push_back(Access{r, bytes, write});
  }
  void read(const Ref& r, const Expr& bytes) { add(r, bytes, false); }
  void write(const Ref& r, const Expr& bytes) { add(r, bytes, true); }
  const AttnDesc& attn(int32_t i) const { return b.attentions.at(static_cast<size_t>(i)); }
  int64_t params_bytes(int32_t i) const {
    const AttnDesc& a = attn(i);
    return 4 * attn_params_floats(a.heads, a.kv_heads, a.head_dim);
  }

  void operator()(const Loop&) {}
  void operator()(const Barrier&) {}
  void operator()(const Dma& d) {
    const Expr span = (d.rows - 1) * Expr(d.src_stride) + Expr(d.row_bytes);
    const Expr dspan = (d.rows - 1) * Expr(d.dst_stride) + Expr(d.row_bytes);
    const bool dram_src = b.buffers.at(static_cast<size_t>(d.src.buffer)).space == Space::kDram;
    const Expr ring = Expr(d.ring_rows * d.ring_stride);
    auto shape = [&](bool ring_side, int64_t stride) {
      Access& a = out.back();
      if (ring_side) {
        a.stride = d.ring_stride;
        a.row_bytes = d.row_bytes;
        a.ring_rows = d.ring_rows;
        a.ring_row0 = d.ring_row0;
        a.ring_count = d.rows;
      } else if (stride > d.row_bytes) {
        a.stride = stride;
        a.row_bytes = d.row_bytes;
      }
    };
    const bool ring_src = d.ring_rows > 0 && dram_src, ring_dst = d.ring_rows > 0 && !dram_src;
    read(d.src, ring_src ? ring : span);
    shape(ring_src, d.src_stride);
    write(d.dst, ring_dst ? ring : dspan);
    shape(ring_dst, d.dst_stride);
  }
  void operator()(const Quantize& q) {
    const int64_t cb = q.bits == 16 ? 2 : 1;
    read(q.x, q.rows * Expr(2 * q.k));
    write(q.codes, q.rows * Expr(cb * q.k));
    write(q.scale, q.rows * Expr(4));
    write(q.zero, q.rows * Expr(4));
  }
  void operator()(const MatMul& m) {
    const int64_t gt = m.group > 0 ? (m.kt + m.group - 1) / m.group : 1;
    const int64_t xb = dtype_bits(m.xtype) / 8;
    read(m.x, ((m.rows - 1) * Expr(m.ldx) + Expr(m.kt)) * Expr(xb));
    read(m.xzero, m.rows * Expr(4));
    read(m.w, Expr(m.n * dtype_bytes(m.wtype, m.kt)));
    read(m.wzero, Expr(m.n * gt * 4));
    const Expr accb = m.rows * Expr(m.n * gt * (dtype_bits(m.acctype) / 8));
    if (m.accumulate) read(m.acc, accb);
    write(m.acc, accb);
  }
  void operator()(const Requant& r) {
    read(r.acc, r.rows * Expr(r.n * r.gt * (dtype_bits(r.acctype) / 8)));
    read(r.xscale, r.rows * Expr(4));
    read(r.wscale, Expr(((r.n - 1) * r.ws_stride + r.gt) * 4));
    const Expr fs = r.rows * Expr(r.n * 4);
    if (!r.first) read(r.fsum, fs);
    if (!r.last) write(r.fsum, fs);
    if (r.last) {
      read(r.bias, Expr(r.n * 4));
      write(r.y, ((r.rows - 1) * Expr(r.ldy) + Expr(r.n)) * Expr(dtype_bits(r.ytype) / 8));
    }
  }
  void operator()(const RmsNorm& n) {
    read(n.x, n.rows * Expr(2 * n.width));
    read(n.weight, Expr(4 * (n.group > 0 ? n.group : n.width)));
    write(n.y, n.rows * Expr(2 * n.width));
  }
  void operator()(const Rope& r) {
    const RopeDesc& d = b.ropes.at(static_cast<size_t>(r.rope));
    read(r.x, r.rows * Expr(2 * d.heads * d.head_dim));
    write(r.y, r.rows * Expr(2 * d.heads * d.head_dim));
  }
  void operator()(const Eltwise& e) {
    const Expr bytes = e.rows * Expr(dtype_bytes(e.type, e.width));
    read(e.a, bytes);
    if (e.op == EltOp::kAdd || e.op == EltOp::kSilu || e.op == EltOp::kGelu) read(e.b, bytes);
    write(e.y, bytes);
  }
  void operator()(const KvQuant& k) {
    const AttnDesc& a = attn(k.attn);
    const int64_t w = a.kv_heads * a.head_dim;
    read(k.k, k.rows * Expr(2 * w));
    read(k.v, k.rows * Expr(2 * w));
    read(k.params, Expr(params_bytes(k.attn)));
    write(k.kcodes, k.rows * Expr(dtype_bytes(code_type(a.k_bits), w)));
    write(k.vcodes, k.rows * Expr(dtype_bytes(code_type(a.v_bits), w)));
  }
  void operator()(const QueryPrep& q) {
    const AttnDesc& a = attn(q.attn);
    const int64_t g = a.heads / a.kv_heads, d = a.head_dim;
    read(q.q, (q.rows - 1) * Expr(2 * a.heads * d) + Expr(2 * g * d));
    read(q.params, Expr(params_bytes(q.attn)));
    write(q.qcodes, q.rows * Expr(4 * g * d));
    write(q.mq, q.rows * Expr(4 * g));
  }
  void operator()(const QkScores& s) {
    const AttnDesc& a = attn(s.attn);
    const int64_t g = a.heads / a.kv_heads, d = a.head_dim;
    read(s.qcodes, s.rows * Expr(4 * g * d));
    read(s.mq, s.rows * Expr(4 * g));
    if (a.rotating) read(s.q, (s.rows - 1) * Expr(2 * a.heads * d) + Expr(2 * g * d));
    read(s.kcodes, Expr(dtype_bytes(code_type(a.k_bits), s.bc * d)));
    read(s.params, Expr(params_bytes(s.attn)));
    write(s.scores, s.rows * Expr(4 * g * s.bc));
    if (s.max_mode == MaxMode::kUpdate) read(s.rowmax, s.rows * Expr(4 * g));
    if (s.max_mode != MaxMode::kNone) write(s.rowmax, s.rows * Expr(4 * g));
  }
  void operator()(const ExpAccum& e) {
    const AttnDesc& a = attn(e.attn);
    const int64_t g = a.heads / a.kv_heads, d = a.head_dim;
    read(e.scores, e.rows * Expr(4 * g * e.bc));
    read(e.rowmax, e.rows * Expr(4 * g));
    read(e.vcodes, Expr(dtype_bytes(code_type(a.v_bits), e.bc * d)));
    if (!e.first) {
      read(e.esum, e.rows * Expr(8 * g));
      read(e.acc, e.rows * Expr(8 * g * d));
    }
    write(e.esum, e.rows * Expr(8 * g));
    write(e.acc, e.rows * Expr(8 * g * d));
  }
  void operator()(const Merge& m) {
    const int64_t es = m.op == MergeOp::kMax ? 4 : 8;
    read(m.parts, Expr(((m.parts_count - 1) * m.part_stride + m.count) * es));
    write(m.out, Expr(m.count * es));
  }
  void operator()(const Fill& f) { write(f.y, f.count * Expr(dtype_bits(f.type) / 8)); }
  void operator()(const AttnOut& o) {
    const AttnDesc& a = attn(o.attn);
    const int64_t g = a.heads / a.kv_heads, d = a.head_dim;
    read(o.acc, o.rows * Expr(8 * g * d));
    read(o.esum, o.rows * Expr(8 * g));
    read(o.params, Expr(params_bytes(o.attn)));
    write(o.y, (o.rows - 1) * Expr(2 * a.heads * d) + Expr(2 * g * d));
  }
};

}  // namespace

std::vector<Access> accesses(const Instr& in, const Bundle& b) {
  AccessBuilder ab{b, {}};
  std::visit(ab, in.op);
  return std::move(ab.out);
}

}  // namespace qbc::isa
