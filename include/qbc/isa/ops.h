// The instruction table: one struct per instruction of the NPU program (its exact meaning in
// its comment) and, beside it, its row: the mnemonic, the queue it runs on and its fields in
// the vocabulary of qbc/isa/field.h (kind, when the text form shows it, the values V8
// accepts, whether a reference is read or written). The printer, the verifier's field
// checks, the MXQ codec and the runtime's operand checks read these rows; docs/npu.md "How
// to add an instruction" lists what else an instruction needs.
//
// QBC_ISA_OPS lists the instructions in the order of isa::Op's alternatives, which is also
// the order of the MXQ Instr message's oneof (field number = index + 1). Append only.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "qbc/isa/field.h"

namespace qbc::isa {

/// A loop over the next `body` instructions of the stream (nested loops included), with
/// `var` running 0..trip-1. Every queue sees the loop (each runs its share of the body).
struct Loop {
  int32_t var = 0;
  Expr trip;
  int32_t body = 0;
};

template <>
struct OpRow<Loop> {
  static constexpr const char* kName = "loop";
  static constexpr QueueClass kQueue = QueueClass::kNone;
  static constexpr auto kFields =
      std::make_tuple(index("var", &Loop::var, FieldKind::kLoopVar), expr("trip", &Loop::trip),
                      integer("body", &Loop::body));
};

/// A strided 2-D copy between DRAM and one core's SRAM (kLoad: DRAM -> SRAM, kStore: SRAM ->
/// DRAM). Row r is read at src + r*src_stride and written at dst + r*dst_stride. With
/// `ring_rows > 0` the DRAM side is a ring of `ring_rows` rows of `ring_stride` bytes: row r
/// goes to ring row (ring_row0 + r) mod ring_rows (KV caches: slot = position mod capacity),
/// and the DRAM side's own stride is ignored. Bytes are copied unchanged (int4 stays packed).
struct Dma {
  Ref dst, src;
  Expr rows = 1;
  int64_t row_bytes = 0, dst_stride = 0, src_stride = 0;
  int64_t ring_rows = 0, ring_stride = 0;
  Expr ring_row0 = 0;
};

/// Whether a DMA uses a ring on its DRAM side (the text form then shows the ring fields).
inline bool dma_ring(const Dma& d) { return d.ring_rows > 0 || d.ring_stride != 0; }
template <>
struct OpRow<Dma> {
  static constexpr const char* kName = "dma";
  static constexpr QueueClass kQueue = QueueClass::kDma;
  static constexpr auto kFields = std::make_tuple(
      ref("dst", &Dma::dst, Role::kOut), ref("src", &Dma::src, Role::kIn), expr("rows", &Dma::rows),
      integer("row_bytes", &Dma::row_bytes, 1),
      integer("dst_stride", &Dma::dst_stride, 0).unless_default(),
      integer("src_stride", &Dma::src_stride, 0).unless_default(),
      integer("ring_rows", &Dma::ring_rows, 0).shown_when(dma_ring),
      integer("ring_stride", &Dma::ring_stride, 0)
          .at_least(+[](const Dma& d) { return d.ring_rows > 0 ? d.row_bytes : int64_t{0}; })
          .shown_when(dma_ring),
      expr("ring_row0", &Dma::ring_row0).shown_when(dma_ring));
  /// Source and destination; a strided side touches rows `stride` apart, a ring side its
  /// ring rows (Access).
  template <class S>
  static void accesses(const Dma& d, S& s) {
    const Expr span = (d.rows - 1) * Expr(d.src_stride) + Expr(d.row_bytes);
    const Expr dspan = (d.rows - 1) * Expr(d.dst_stride) + Expr(d.row_bytes);
    const bool dram_src = s.dram(d.src);
    const Expr ring = Expr(d.ring_rows * d.ring_stride);
    const bool ring_src = d.ring_rows > 0 && dram_src, ring_dst = d.ring_rows > 0 && !dram_src;
    s.read(d.src, ring_src ? ring : span);
    s.shape(ring_src, d.src_stride, d);
    s.write(d.dst, ring_dst ? ring : dspan);
    s.shape(ring_dst, d.dst_stride, d);
  }
};

/// All `cores` cores of the program reach barrier `id` before any passes it. Barriers
/// order DRAM traffic between cores; ids increase along every core's stream.
struct Barrier {
  int32_t id = 0;
  int32_t cores = 1;
};

template <>
struct OpRow<Barrier> {
  static constexpr const char* kName = "barrier";
  static constexpr QueueClass kQueue = QueueClass::kCompute;
  static constexpr auto kFields =
      std::make_tuple(integer("id", &Barrier::id, 0), integer("cores", &Barrier::cores, 1));
};

/// Quantization modes of activation rows (docs/numerics.md "Quantizers").
enum class QuantMode : uint8_t { kStaticSymmetric, kStaticAffine, kTokenSymmetric, kTokenAffine };
const char* quant_mode_name(QuantMode m);

/// Quantizes rows of fp16 values x[rows, k] to codes[rows, k] (int8 for bits 8, int16 for
/// 16), writing each row's scale (fp32) and zero point (int32; 0 when symmetric). Per-token
/// modes compute them from the row (numerics per_token_scale / per_token_affine), static
/// modes use `scale` / `zero`. Codes are the quantizer's codes (zero point not subtracted).
struct Quantize {
  Ref x, codes, scale, zero;
  Expr rows = 1;
  int64_t k = 0;
  int32_t bits = 8;
  QuantMode mode = QuantMode::kTokenAffine;
  float static_scale = 1.0f;
  int32_t static_zero = 0;
  /// x holds fp32 rows (the values of a head kept in fp32, e.g. a vision projector's
  /// second linear) instead of fp16; the codes are computed from the fp32 values.
  bool x_f32 = false;
};

inline bool quantize_static(const Quantize& q) {
  return q.mode == QuantMode::kStaticSymmetric || q.mode == QuantMode::kStaticAffine;
}
template <>
struct OpRow<Quantize> {
  static constexpr const char* kName = "quantize";
  static constexpr QueueClass kQueue = QueueClass::kCompute;
  static constexpr auto kFields = std::make_tuple(
      ref("x", &Quantize::x, Role::kIn), ref("codes", &Quantize::codes, Role::kOut),
      ref("scale", &Quantize::scale, Role::kOut), opt_ref("zero", &Quantize::zero, Role::kOut),
      expr("rows", &Quantize::rows), integer("k", &Quantize::k, 1),
      integer("bits", &Quantize::bits).allow(4, 8, 16),
      enumeration("mode", &Quantize::mode, 4, quant_mode_name),
      real("static_scale", &Quantize::static_scale).finite().shown_when(quantize_static),
      integer("static_zero", &Quantize::static_zero).shown_when(+[](const Quantize& q) {
        return quantize_static(q) && q.static_zero != 0;
      }),
      flag("x_f32", &Quantize::x_f32).unless_default());
  template <class S>
  static void accesses(const Quantize& q, S& s) {
    const int64_t cb = q.bits == 16 ? 2 : 1;
    s.read(q.x, q.rows * Expr((q.x_f32 ? 4 : 2) * q.k));
    s.write(q.codes, q.rows * Expr(cb * q.k));
    s.write(q.scale, q.rows * Expr(4));
    s.write(q.zero, q.rows * Expr(4));
  }
};

/// Integer matmul tile: acc[m, j, g] (+)= Σ_{k in group g} (x[m, k] − xz[m]) · (w[j, k] −
/// wz[j, g]) for m < rows, j < n, k < kt, exactly (int64 arithmetic, stored as acc's type).
/// x: codes [rows, ldx] (int8 or int16), xz: int32 [rows] (may be invalid: 0); w: [n, kt]
/// int8 or packed int4 (kt/2 bytes a row); wz: int32 [n, gt] or invalid (0); groups of `group`
/// columns (0: one group of kt, gt = 1). `accumulate` adds to acc instead of assigning.
/// `xsum` (may be invalid): also writes this tile's code sums per row and group,
/// xsum[m, g] = Σ_{k in group g} (x[m, k] − xz[m]) as acc's type (assigned, even when acc
/// accumulates), for the float offsets of requant (docs/numerics.md "Float offsets").
struct MatMul {
  Ref x, xzero, w, wzero, acc;
  Expr rows = 1;
  int64_t n = 0, kt = 0, ldx = 0, group = 0;
  DType xtype = DType::kI8, wtype = DType::kI8, acctype = DType::kI32;
  bool accumulate = false;
  Ref xsum;
};

template <>
struct OpRow<MatMul> {
  static constexpr const char* kName = "matmul";
  static constexpr QueueClass kQueue = QueueClass::kCompute;
  static constexpr auto kFields =
      std::make_tuple(ref("x", &MatMul::x, Role::kIn), opt_ref("xzero", &MatMul::xzero, Role::kIn),
                      ref("w", &MatMul::w, Role::kIn), opt_ref("wzero", &MatMul::wzero, Role::kIn),
                      ref("acc", &MatMul::acc, Role::kInOut), expr("rows", &MatMul::rows),
                      integer("n", &MatMul::n, 1), integer("kt", &MatMul::kt, 1),
                      integer("ldx", &MatMul::ldx)
                          .at_least(+[](const MatMul& m) { return m.kt; })
                          .shown_when(+[](const MatMul& m) { return m.ldx != m.kt; }),
                      integer("group", &MatMul::group, 0).unless_default(),
                      enumeration("xtype", &MatMul::xtype, 8, dtype_name)
                          .allow(DType::kI8, DType::kI16)
                          .unless_default(),
                      enumeration("wtype", &MatMul::wtype, 8, dtype_name)
                          .allow(DType::kI8, DType::kI4)
                          .unless_default(),
                      enumeration("acctype", &MatMul::acctype, 8, dtype_name)
                          .allow(DType::kI32, DType::kI64)
                          .unless_default(),
                      flag("accumulate", &MatMul::accumulate).unless_default(),
                      opt_ref("xsum", &MatMul::xsum, Role::kOut).unless_default());
  /// Rules between fields (V8), beyond each field's own range.
  static std::string check(const MatMul& d) {
    if (d.group > d.kt) {
      return "group " + std::to_string(d.group) + " exceeds kt " + std::to_string(d.kt);
    }
    if (d.wtype == DType::kI4 && (d.kt % 2 != 0 || d.group % 2 != 0)) {
      return "int4 weights need an even kt " + std::to_string(d.kt) + " and group " +
             std::to_string(d.group);
    }
    return "";
  }
  template <class S>
  static void accesses(const MatMul& m, S& s) {
    const int64_t gt = m.group > 0 ? (m.kt + m.group - 1) / m.group : 1;
    const int64_t xb = dtype_bits(m.xtype) / 8;
    s.read(m.x, ((m.rows - 1) * Expr(m.ldx) + Expr(m.kt)) * Expr(xb));
    s.read(m.xzero, m.rows * Expr(4));
    s.read(m.w, Expr(m.n * dtype_bytes(m.wtype, m.kt)));
    s.read(m.wzero, Expr(m.n * gt * 4));
    const Expr accb = m.rows * Expr(m.n * gt * (dtype_bits(m.acctype) / 8));
    if (m.accumulate) s.read(m.acc, accb);
    s.write(m.acc, accb);
    s.write(m.xsum, m.rows * Expr(gt * (dtype_bits(m.acctype) / 8)));
  }
};

/// Requantizes acc[rows, n, gt] (group order g = 0..gt-1) into the fp32 sums fsum[rows, n]:
/// part_g = fp32(fp32(acc) · fp32(xs[m] · ws[j, g])), v = (first ? part_0 : fsum + part_0) +
/// part_1 + ...; `last`: y[m, j] = round(v + bias[j]) (fp16 or fp32 by ytype, row stride
/// ldy elements), else fsum = v. ws rows are `ws_stride` floats apart (the channel's groups).
/// With float offsets (`xsum` and `wmin` both set; docs/numerics.md "Float offsets"):
/// part_g = fp32(part_g + fp32(fp32(xsum[m, g]) · fp32(xs[m] · wmin[j, g]))), wmin laid out
/// like ws (fp32, or fp16 in an f16 buffer) and xsum [rows, gt] of acc's type.
struct Requant {
  Ref acc, xscale, wscale, fsum, bias, y;
  Expr rows = 1;
  int64_t n = 0, gt = 1, ws_stride = 1, ldy = 0;
  DType acctype = DType::kI32, ytype = DType::kF16;
  bool first = true, last = true;
  Ref xsum, wmin;
};

template <>
struct OpRow<Requant> {
  static constexpr const char* kName = "requant";
  static constexpr QueueClass kQueue = QueueClass::kCompute;
  static constexpr auto kFields = std::make_tuple(
      ref("acc", &Requant::acc, Role::kIn), ref("xscale", &Requant::xscale, Role::kIn),
      ref("wscale", &Requant::wscale, Role::kIn),
      ref_when(
          "fsum", &Requant::fsum, Role::kInOut,
          +[](const Requant& r) { return !r.first || !r.last; }),
      opt_ref("bias", &Requant::bias, Role::kIn),
      ref_when(
          "y", &Requant::y, Role::kOut, +[](const Requant& r) { return r.last; }),
      expr("rows", &Requant::rows), integer("n", &Requant::n, 1),
      integer("gt", &Requant::gt, 1).unless_default(),
      integer("ws_stride", &Requant::ws_stride)
          .at_least(+[](const Requant& r) { return r.gt; })
          .unless_default(),
      integer("ldy", &Requant::ldy)
          .at_least(+[](const Requant& r) { return r.last ? r.n : int64_t{0}; })
          .shown_when(+[](const Requant& r) { return r.last; }),
      enumeration("acctype", &Requant::acctype, 8, dtype_name)
          .allow(DType::kI32, DType::kI64)
          .unless_default(),
      enumeration("ytype", &Requant::ytype, 8, dtype_name)
          .allow(DType::kF16, DType::kF32)
          .unless_default(),
      flag("first", &Requant::first).unless_default(),
      flag("last", &Requant::last).unless_default(),
      opt_ref("xsum", &Requant::xsum, Role::kIn).unless_default(),
      opt_ref("wmin", &Requant::wmin, Role::kIn).unless_default());
  /// Rules between fields (V8), beyond each field's own range.
  static std::string check(const Requant& d) {
    if (d.xsum.valid() != d.wmin.valid()) return "xsum and wmin go together";
    return "";
  }
  template <class S>
  static void accesses(const Requant& r, S& s) {
    s.read(r.acc, r.rows * Expr(r.n * r.gt * (dtype_bits(r.acctype) / 8)));
    s.read(r.xscale, r.rows * Expr(4));
    s.read(r.wscale, Expr(((r.n - 1) * r.ws_stride + r.gt) * 4));
    s.read(r.xsum, r.rows * Expr(r.gt * (dtype_bits(r.acctype) / 8)));
    s.read(r.wmin, Expr(((r.n - 1) * r.ws_stride + r.gt) * 4));
    const Expr fs = r.rows * Expr(r.n * 4);
    if (!r.first) s.read(r.fsum, fs);
    if (!r.last) s.write(r.fsum, fs);
    if (r.last) {
      s.read(r.bias, Expr(r.n * 4));
      s.write(r.y, ((r.rows - 1) * Expr(r.ldy) + Expr(r.n)) * Expr(dtype_bits(r.ytype) / 8));
    }
  }
};

/// RMSNorm of fp16 rows x[rows, width] with fp32 weights [width], or with `group > 0` of
/// every group of `group` columns with the same weights [group] (q/k norms per head)
/// (numerics rms_norm).
struct RmsNorm {
  Ref x, weight, y;
  Expr rows = 1;
  int64_t width = 0, group = 0;
  double eps = 0.0, unit_offset = 0.0;
};

template <>
struct OpRow<RmsNorm> {
  static constexpr const char* kName = "rms_norm";
  static constexpr QueueClass kQueue = QueueClass::kCompute;
  static constexpr auto kFields = std::make_tuple(
      ref("x", &RmsNorm::x, Role::kIn), ref("weight", &RmsNorm::weight, Role::kIn),
      ref("y", &RmsNorm::y, Role::kOut), expr("rows", &RmsNorm::rows),
      integer("width", &RmsNorm::width, 1), integer("group", &RmsNorm::group, 0).unless_default(),
      real("eps", &RmsNorm::eps).finite(),
      real("unit_offset", &RmsNorm::unit_offset).finite().unless_default());
  /// Rules between fields (V8), beyond each field's own range.
  static std::string check(const RmsNorm& d) {
    if (d.group > 0 && d.width % d.group != 0) {
      return "width " + std::to_string(d.width) + " is not a multiple of group " +
             std::to_string(d.group);
    }
    if (d.eps < 0) return "eps and unit_offset must be finite, eps >= 0";
    return "";
  }
  template <class S>
  static void accesses(const RmsNorm& n, S& s) {
    s.read(n.x, n.rows * Expr(2 * n.width));
    s.read(n.weight, Expr(4 * (n.group > 0 ? n.group : n.width)));
    s.write(n.y, n.rows * Expr(2 * n.width));
  }
};

/// LayerNorm of fp16 rows x[rows, width] over each row (mean-subtracting), with fp32
/// parameters [2, width]: the scale row, then the bias row (zeros for a norm without bias)
/// (numerics layer_norm).
struct LayerNorm {
  Ref x, weight, y;
  Expr rows = 1;
  int64_t width = 0;
  double eps = 0.0;
};

template <>
struct OpRow<LayerNorm> {
  static constexpr const char* kName = "layer_norm";
  static constexpr QueueClass kQueue = QueueClass::kCompute;
  static constexpr auto kFields = std::make_tuple(
      ref("x", &LayerNorm::x, Role::kIn), ref("weight", &LayerNorm::weight, Role::kIn),
      ref("y", &LayerNorm::y, Role::kOut), expr("rows", &LayerNorm::rows),
      integer("width", &LayerNorm::width, 1), real("eps", &LayerNorm::eps).finite());
  /// Rules between fields (V8), beyond each field's own range.
  static std::string check(const LayerNorm& d) { return d.eps < 0 ? "eps must be >= 0" : ""; }
  template <class S>
  static void accesses(const LayerNorm& n, S& s) {
    s.read(n.x, n.rows * Expr(2 * n.width));
    s.read(n.weight, Expr(8 * n.width));
    s.write(n.y, n.rows * Expr(2 * n.width));
  }
};

/// RoPE of fp16 rows [rows, heads*head_dim] at positions pos0.. with Bundle::ropes[rope];
/// frequencies are those of a call whose last position is `freq_pos` (numerics rope).
struct Rope {
  Ref x, y;  ///< rows of heads*head_dim fp16 values
  Expr rows = 1, pos0 = 0, freq_pos = 0;
  int32_t rope = -1;
};

template <>
struct OpRow<Rope> {
  static constexpr const char* kName = "rope";
  static constexpr QueueClass kQueue = QueueClass::kCompute;
  static constexpr auto kFields = std::make_tuple(
      ref("x", &Rope::x, Role::kIn), ref("y", &Rope::y, Role::kOut), expr("rows", &Rope::rows),
      expr("pos0", &Rope::pos0), expr("freq_pos", &Rope::freq_pos),
      index("rope", &Rope::rope, FieldKind::kRope));
  template <class S>
  static void accesses(const Rope& r, S& s) {
    const auto& d = s.rope(r.rope);
    s.read(r.x, r.rows * Expr(2 * d.heads * d.head_dim));
    s.write(r.y, r.rows * Expr(2 * d.heads * d.head_dim));
  }
};

/// RoPE of fp16 rows [rows, heads*head_dim] with host tables (numerics rope_table): row r
/// rotates by cos[r], sin[r], fp16 rows of head_dim/2 values each (the program's rope-table
/// inputs, one row per token of the call: docs/multimodal.md).
struct RopeTable {
  Ref x, cos, sin, y;  ///< x, y: rows of heads*head_dim fp16; cos, sin: rows of head_dim/2
  Expr rows = 1;
  int64_t heads = 0, head_dim = 0;
};

template <>
struct OpRow<RopeTable> {
  static constexpr const char* kName = "rope_table";
  static constexpr QueueClass kQueue = QueueClass::kCompute;
  static constexpr auto kFields =
      std::make_tuple(ref("x", &RopeTable::x, Role::kIn), ref("cos", &RopeTable::cos, Role::kIn),
                      ref("sin", &RopeTable::sin, Role::kIn), ref("y", &RopeTable::y, Role::kOut),
                      expr("rows", &RopeTable::rows), integer("heads", &RopeTable::heads, 1),
                      integer("head_dim", &RopeTable::head_dim, 2));
  /// Rules between fields (V8), beyond each field's own range.
  static std::string check(const RopeTable& d) {
    return d.head_dim % 2 != 0 ? "head_dim must be even" : "";
  }
  template <class S>
  static void accesses(const RopeTable& r, S& s) {
    s.read(r.x, r.rows * Expr(2 * r.heads * r.head_dim));
    s.read(r.cos, r.rows * Expr(r.head_dim));
    s.read(r.sin, r.rows * Expr(r.head_dim));
    s.write(r.y, r.rows * Expr(2 * r.heads * r.head_dim));
  }
};

/// Elementwise ops over rows*width contiguous values (numerics elementwise).
/// kGeluErf, kGeluQuick and kGeluTanh are unary: y = gelu(a) (erf), CLIP's quick_gelu
/// a·σ(1.702·a) or SigLIP's tanh GELU (numerics gelu / gelu_tanh; vision towers).
enum class EltOp : uint8_t {
  kAdd,
  kSilu,
  kGelu,
  kScale,
  kSoftcap,
  kGeluErf,
  kGeluQuick,
  kGeluTanh
};
const char* elt_name(EltOp op);
struct Eltwise {
  EltOp op = EltOp::kAdd;
  Ref a, b, y;  ///< b: the second input of kAdd and the up input of kSilu/kGelu (y = act(a) * b)
  Expr rows = 1;
  int64_t width = 0;
  float factor = 1.0f;  ///< kScale: factor, kSoftcap: cap
  /// Type of the inputs and the output: kF16 (body values, rounded to fp16) or kF32 (values
  /// of the head, e.g. soft-capped logits, not rounded).
  DType type = DType::kF16;
};

/// Whether an elementwise op reads its second input b.
inline bool eltwise_binary(const Eltwise& e) {
  return e.op == EltOp::kAdd || e.op == EltOp::kSilu || e.op == EltOp::kGelu;
}
template <>
struct OpRow<Eltwise> {
  static constexpr const char* kName = "eltwise";
  static constexpr QueueClass kQueue = QueueClass::kCompute;
  static constexpr auto kFields = std::make_tuple(
      enumeration("op", &Eltwise::op, 8, elt_name), ref("a", &Eltwise::a, Role::kIn),
      ref_when("b", &Eltwise::b, Role::kIn, eltwise_binary), ref("y", &Eltwise::y, Role::kOut),
      expr("rows", &Eltwise::rows), integer("width", &Eltwise::width, 1),
      real("factor", &Eltwise::factor).finite().shown_when(+[](const Eltwise& e) {
        return e.op == EltOp::kScale || e.op == EltOp::kSoftcap || e.factor != 1.0f;
      }),
      enumeration("type", &Eltwise::type, 8, dtype_name)
          .allow(DType::kF16, DType::kF32)
          .unless_default());
  /// Rules between fields (V8), beyond each field's own range.
  static std::string check(const Eltwise& d) {
    if (d.op == EltOp::kSoftcap && d.factor <= 0) return "the softcap is not positive";
    return "";
  }
  template <class S>
  static void accesses(const Eltwise& e, S& s) {
    const Expr bytes = e.rows * Expr(dtype_bytes(e.type, e.width));
    s.read(e.a, bytes);
    if (eltwise_binary(e)) s.read(e.b, bytes);
    s.write(e.y, bytes);
  }
};

/// Quantizes rows of K and V (fp16 [rows, KV*d], K after RoPE) into cache codes [rows, KV*d]
/// (the K and V dtypes of the attention), subtracting rope(m) at positions pos0.. first when
/// the attention has rotating key offsets (numerics attention append).
struct KvQuant {
  Ref k, v, kcodes, vcodes, params;
  Expr rows = 1, pos0 = 0;
  int32_t attn = -1;
  /// 0: row t holds the records of every KV head in order. > 0 (packed caches): KV head h's
  /// records start `head_stride` records apart and row t's is record rec0 + t of its head
  /// (blocks of the cache loaded into SRAM, written back whole).
  int64_t head_stride = 0;
  Expr rec0 = 0;
};

template <>
struct OpRow<KvQuant> {
  static constexpr const char* kName = "kv_quant";
  static constexpr QueueClass kQueue = QueueClass::kCompute;
  static constexpr auto kFields = std::make_tuple(
      ref("k", &KvQuant::k, Role::kIn), ref("v", &KvQuant::v, Role::kIn),
      ref("kcodes", &KvQuant::kcodes, Role::kOut), ref("vcodes", &KvQuant::vcodes, Role::kOut),
      ref("params", &KvQuant::params, Role::kIn), expr("rows", &KvQuant::rows),
      expr("pos0", &KvQuant::pos0), index("attn", &KvQuant::attn, FieldKind::kAttn),
      integer("head_stride", &KvQuant::head_stride, 0).unless_default(),
      expr("rec0", &KvQuant::rec0).unless_default());
  template <class S>
  static void accesses(const KvQuant& k, S& s) {
    const auto& a = s.attn(k.attn);
    const int64_t w = a.kv_heads * a.head_dim;
    s.read(k.k, k.rows * Expr(2 * w));
    s.read(k.v, k.rows * Expr(2 * w));
    s.read(k.params, Expr(s.params_bytes(k.attn)));
    if (k.head_stride > 0) {  // the last head's records rec0 .. rec0 + rows - 1
      const Expr records = Expr((a.kv_heads - 1) * k.head_stride) + k.rec0 + k.rows;
      s.write(k.kcodes, records * Expr(a.key_record()));
      s.write(k.vcodes, records * Expr(a.value_record()));
      return;
    }
    s.write(k.kcodes, k.rows * Expr(a.kv_heads * a.key_record()));
    s.write(k.vcodes, k.rows * Expr(a.kv_heads * a.value_record()));
  }
};

/// Prepares the queries of the g query heads of KV head `kv_head`: q points at row 0, column
/// kv_head*g*d of fp16 rows of H*d values; qcodes int32 [rows*g, d] and multipliers mq fp32
/// [rows*g] (numerics query_codes).
struct QueryPrep {
  Ref q, params, qcodes, mq;
  Expr rows = 1;
  int64_t kv_head = 0;
  int32_t attn = -1;
};

template <>
struct OpRow<QueryPrep> {
  static constexpr const char* kName = "query_prep";
  static constexpr QueueClass kQueue = QueueClass::kCompute;
  static constexpr auto kFields = std::make_tuple(
      ref("q", &QueryPrep::q, Role::kIn), ref("params", &QueryPrep::params, Role::kIn),
      ref("qcodes", &QueryPrep::qcodes, Role::kOut), ref("mq", &QueryPrep::mq, Role::kOut),
      expr("rows", &QueryPrep::rows), index("kv_head", &QueryPrep::kv_head, FieldKind::kKvHead),
      index("attn", &QueryPrep::attn, FieldKind::kAttn));
  template <class S>
  static void accesses(const QueryPrep& q, S& s) {
    const auto& a = s.attn(q.attn);
    const int64_t g = a.heads / a.kv_heads, d = a.head_dim;
    s.read(q.q, (q.rows - 1) * Expr(2 * a.heads * d) + Expr(2 * g * d));
    s.read(q.params, Expr(s.params_bytes(q.attn)));
    s.write(q.qcodes, q.rows * Expr(4 * g * d));
    s.write(q.mq, q.rows * Expr(4 * g));
  }
};

/// Scores of the g query heads of `kv_head` (rows [rows]) against a chunk of `bc` cached keys
/// kcodes [bc, d] at positions kpos0.. (q as in QueryPrep, read for the rotating-offset
/// correction): scores fp32 [rows*g, bc] (numerics key_score, with
/// rope(m) at the key's position under rotating offsets); a key after the query (qpos0 + r),
/// outside the window or before position 0 scores −inf. max_mode: kNone leaves rowmax,
/// kInit sets it to this chunk's row max, kUpdate takes the max with it. With `span` (a span
/// program: the call is one bidirectional span, numerics::attention's span rule) every row
/// also sees the call's keys: the query at p sees [max(0, min(p − window + 1, start)),
/// max(p, start + seq − 1)] (start and seq: the call's Sym values; no window: from 0).
enum class MaxMode : uint8_t { kNone, kInit, kUpdate };
const char* max_mode_name(MaxMode m);
struct QkScores {
  Ref qcodes, mq, q, kcodes, params, scores, rowmax;
  Expr rows = 1, qpos0 = 0, kpos0 = 0;
  int64_t bc = 0, kv_head = 0;
  MaxMode max_mode = MaxMode::kNone;
  int32_t attn = -1;
  bool span = false;
};

template <>
struct OpRow<QkScores> {
  static constexpr const char* kName = "qk_scores";
  static constexpr QueueClass kQueue = QueueClass::kCompute;
  static constexpr auto kFields = std::make_tuple(
      ref("qcodes", &QkScores::qcodes, Role::kIn), ref("mq", &QkScores::mq, Role::kIn),
      opt_ref("q", &QkScores::q, Role::kIn), ref("kcodes", &QkScores::kcodes, Role::kIn),
      ref("params", &QkScores::params, Role::kIn), ref("scores", &QkScores::scores, Role::kOut),
      ref_when(
          "rowmax", &QkScores::rowmax, Role::kInOut,
          +[](const QkScores& s) { return s.max_mode != MaxMode::kNone; }),
      expr("rows", &QkScores::rows), expr("qpos0", &QkScores::qpos0),
      expr("kpos0", &QkScores::kpos0), integer("bc", &QkScores::bc, 1),
      index("kv_head", &QkScores::kv_head, FieldKind::kKvHead),
      enumeration("max", &QkScores::max_mode, 3, max_mode_name)
          .unless_default()
          .proto_named("max_mode"),
      index("attn", &QkScores::attn, FieldKind::kAttn),
      flag("span", &QkScores::span).unless_default());
  template <class S>
  static void accesses(const QkScores& q, S& s) {
    const auto& a = s.attn(q.attn);
    const int64_t g = a.heads / a.kv_heads, d = a.head_dim;
    s.read(q.qcodes, q.rows * Expr(4 * g * d));
    s.read(q.mq, q.rows * Expr(4 * g));
    if (a.rotating) s.read(q.q, (q.rows - 1) * Expr(2 * a.heads * d) + Expr(2 * g * d));
    s.read(q.kcodes, a.token_fields() ? Expr(q.bc * a.key_record())
                                      : Expr(dtype_bytes(code_type(a.k_bits), q.bc * d)));
    s.read(q.params, Expr(s.params_bytes(q.attn)));
    s.write(q.scores, q.rows * Expr(4 * g * q.bc));
    if (q.max_mode == MaxMode::kUpdate) s.read(q.rowmax, q.rows * Expr(4 * g));
    if (q.max_mode != MaxMode::kNone) s.write(q.rowmax, q.rows * Expr(4 * g));
  }
};

/// Exponent codes of scores [rows*g, bc] against rowmax (numerics exp_code) and their
/// integer sums: esum int64 [rows*g] (+)= Σ_j e, acc int64 [rows*g, d] (+)= Σ_j e · vcodes[j].
struct ExpAccum {
  Ref scores, rowmax, vcodes, esum, acc;
  Expr rows = 1;
  int64_t bc = 0;
  bool first = false;
  int32_t attn = -1;
};

template <>
struct OpRow<ExpAccum> {
  static constexpr const char* kName = "exp_accum";
  static constexpr QueueClass kQueue = QueueClass::kCompute;
  static constexpr auto kFields = std::make_tuple(
      ref("scores", &ExpAccum::scores, Role::kIn), ref("rowmax", &ExpAccum::rowmax, Role::kIn),
      ref("vcodes", &ExpAccum::vcodes, Role::kIn), ref("esum", &ExpAccum::esum, Role::kInOut),
      ref("acc", &ExpAccum::acc, Role::kInOut), expr("rows", &ExpAccum::rows),
      integer("bc", &ExpAccum::bc, 1), flag("first", &ExpAccum::first).unless_default(),
      index("attn", &ExpAccum::attn, FieldKind::kAttn));
  template <class S>
  static void accesses(const ExpAccum& e, S& s) {
    const auto& a = s.attn(e.attn);
    const int64_t g = a.heads / a.kv_heads, d = a.head_dim;
    s.read(e.scores, e.rows * Expr(4 * g * e.bc));
    s.read(e.rowmax, e.rows * Expr(4 * g));
    s.read(e.vcodes, a.token_fields() ? Expr(e.bc * a.value_record())
                                      : Expr(dtype_bytes(code_type(a.v_bits), e.bc * d)));
    if (!e.first) {
      s.read(e.esum, e.rows * Expr(8 * g));
      s.read(e.acc, e.rows * Expr(8 * g * d));
    }
    s.write(e.esum, e.rows * Expr(8 * g));
    s.write(e.acc, e.rows * Expr(8 * g * d));
  }
};

/// Merges `parts` partial rows parts[p, count] into out[count]: elementwise max (fp32) or
/// integer sum (int64). Both are order-free, so any number of cores gives the same bits.
enum class MergeOp : uint8_t { kMax, kSum };
const char* merge_op_name(MergeOp op);
struct Merge {
  MergeOp op = MergeOp::kSum;
  Ref parts, out;
  int64_t parts_count = 1, count = 0, part_stride = 0;  ///< part_stride: elements between parts
};

template <>
struct OpRow<Merge> {
  static constexpr const char* kName = "merge";
  static constexpr QueueClass kQueue = QueueClass::kCompute;
  static constexpr auto kFields = std::make_tuple(
      enumeration("op", &Merge::op, 2, merge_op_name), ref("parts", &Merge::parts, Role::kIn),
      ref("out", &Merge::out, Role::kOut), integer("parts_count", &Merge::parts_count, 1),
      integer("count", &Merge::count, 1),
      integer("part_stride", &Merge::part_stride)
          .at_least(+[](const Merge& m) { return m.parts_count > 1 ? m.count : int64_t{0}; })
          .unless_default());
  template <class S>
  static void accesses(const Merge& m, S& s) {
    const int64_t es = m.op == MergeOp::kMax ? 4 : 8;
    s.read(m.parts, Expr(((m.parts_count - 1) * m.part_stride + m.count) * es));
    s.write(m.out, Expr(m.count * es));
  }
};

/// The attention output of the g heads of `kv_head`: y points at row 0, column kv_head*g*d
/// of fp16 rows of H*d values; y[r, i*d + c] = attention_output(acc, esum, v_scale[c],
/// v_offset[c]) for the head's channels.
struct AttnOut {
  Ref acc, esum, params, y;
  Expr rows = 1;
  int64_t kv_head = 0;
  int32_t attn = -1;
};

template <>
struct OpRow<AttnOut> {
  static constexpr const char* kName = "attn_out";
  static constexpr QueueClass kQueue = QueueClass::kCompute;
  static constexpr auto kFields = std::make_tuple(
      ref("acc", &AttnOut::acc, Role::kIn), ref("esum", &AttnOut::esum, Role::kIn),
      ref("params", &AttnOut::params, Role::kIn), ref("y", &AttnOut::y, Role::kOut),
      expr("rows", &AttnOut::rows), index("kv_head", &AttnOut::kv_head, FieldKind::kKvHead),
      index("attn", &AttnOut::attn, FieldKind::kAttn));
  template <class S>
  static void accesses(const AttnOut& o, S& s) {
    const auto& a = s.attn(o.attn);
    const int64_t g = a.heads / a.kv_heads, d = a.head_dim;
    s.read(o.acc, o.rows * Expr(8 * g * d));
    s.read(o.esum, o.rows * Expr(8 * g));
    s.read(o.params, Expr(s.params_bytes(o.attn)));
    s.write(o.y, (o.rows - 1) * Expr(2 * a.heads * d) + Expr(2 * g * d));
  }
};

/// Sets `count` elements of y (kF32 or kI64) to `value` (rowmax = −inf, sums = 0).
struct Fill {
  Ref y;
  Expr count = 1;
  DType type = DType::kF32;
  double value = 0.0;
};

template <>
struct OpRow<Fill> {
  static constexpr const char* kName = "fill";
  static constexpr QueueClass kQueue = QueueClass::kCompute;
  static constexpr auto kFields = std::make_tuple(
      ref("y", &Fill::y, Role::kOut), expr("count", &Fill::count),
      enumeration("type", &Fill::type, 8, dtype_name).allow(DType::kF32, DType::kI64),
      real("value", &Fill::value));
  /// Rules between fields (V8), beyond each field's own range.
  static std::string check(const Fill& d) {
    if (std::isnan(d.value)) return "value is NaN";
    return "";
  }
  template <class S>
  static void accesses(const Fill& f, S& s) {
    s.write(f.y, f.count * Expr(dtype_bits(f.type) / 8));
  }
};

/// The mean of each kernel x kernel window of a row-major grid of fp16 rows `grid_w` rows wide
/// (numerics avg_pool, fp16 output): x holds rows·kernel² rows of `width` values, whole bands of
/// `kernel` grid rows; y gets `rows` rows, one per window, windows in row-major order. `rows`
/// is a multiple of grid_w / kernel (the runtime refuses another count). Gemma 3's projector.
struct AvgPool {
  Ref x, y;
  Expr rows = 1;
  int64_t width = 0, grid_w = 1;
  int32_t kernel = 1;
};

template <>
struct OpRow<AvgPool> {
  static constexpr const char* kName = "avg_pool";
  static constexpr QueueClass kQueue = QueueClass::kCompute;
  static constexpr auto kFields = std::make_tuple(
      ref("x", &AvgPool::x, Role::kIn), ref("y", &AvgPool::y, Role::kOut),
      expr("rows", &AvgPool::rows), integer("width", &AvgPool::width, 1),
      integer("grid_w", &AvgPool::grid_w, 1), integer("kernel", &AvgPool::kernel, 1));
  /// Rules between fields (V8), beyond each field's own range.
  static std::string check(const AvgPool& p) {
    return p.grid_w % p.kernel != 0 ? "grid_w must be a multiple of kernel" : "";
  }
  template <class S>
  static void accesses(const AvgPool& p, S& s) {
    s.read(p.x, p.rows * Expr(2 * p.kernel * p.kernel * p.width));
    s.write(p.y, p.rows * Expr(2 * p.width));
  }
};

/// Every instruction, in the order of Op's alternatives (append only: the MXQ oneof).
// clang-format off
#define QBC_ISA_OPS(X)                                                                           \
  X(Loop) X(Dma) X(Barrier) X(Quantize) X(MatMul) X(Requant) X(RmsNorm) X(Rope) X(Eltwise)     \
  X(KvQuant) X(QueryPrep) X(QkScores) X(ExpAccum) X(Merge) X(AttnOut) X(Fill) X(LayerNorm)    \
  X(RopeTable) X(AvgPool)
// clang-format on

namespace detail {
template <class First, class... Rest>
struct VariantOfRest {
  using type = std::variant<Rest...>;
};
}  // namespace detail

#define QBC_ISA_OP_TYPE(T) , T
/// One instruction's op.
using Op = detail::VariantOfRest<void QBC_ISA_OPS(QBC_ISA_OP_TYPE)>::type;
#undef QBC_ISA_OP_TYPE

namespace detail {
template <class T, class V>
struct IndexIn;
template <class T, class... Ts>
struct IndexIn<T, std::variant<Ts...>> {
  static constexpr size_t value() {
    size_t i = 0;
    bool found = false;
    ((found = found || std::is_same_v<T, Ts>, i += found ? 0 : 1), ...);
    return i;
  }
};
}  // namespace detail

/// The index of op T among Op's alternatives (its row in op_table()).
template <class T>
constexpr size_t op_index() {
  return detail::IndexIn<T, Op>::value();
}

/// The mnemonic of an instruction's op ("loop", "dma", ...).
const char* op_name(const Op& op);
/// The queue class of an op.
QueueClass op_queue(const Op& op);

/// A row without types, for tools that read the table by name (the text parser, tests).
struct OpInfo {
  const char* name;
  QueueClass queue;
  std::vector<FieldSpec> fields;
};
/// The table, indexed like Op's alternatives.
const std::vector<OpInfo>& op_table();
/// The index of the op named `name` in op_table(), or -1.
int find_op(const std::string& name);
/// The op of row `index` (0 <= index < op_table().size()) at its struct's initial values,
/// for readers that fill it field by field (visit_fields_mut).
Op default_op(size_t index);

/// Calls fn(field, value) for every field of the op `op` holds (see for_each_field).
template <class Fn>
void visit_fields(const Op& op, Fn&& fn) {
  std::visit([&](const auto& o) { for_each_field(o, fn); }, op);
}
template <class Fn>
void visit_fields_mut(Op& op, Fn&& fn) {
  std::visit([&](auto& o) { for_each_field_mut(o, fn); }, op);
}

namespace detail {
template <class T, class = void>
struct HasRules : std::false_type {};
template <class T>
struct HasRules<T, std::void_t<decltype(OpRow<T>::check(std::declval<const T&>()))>>
    : std::true_type {};
}  // namespace detail

/// The rules between fields of `op` that its row adds (V8), "" when they hold.
template <class T>
std::string op_rules(const T& op) {
  if constexpr (detail::HasRules<T>::value) {
    return OpRow<T>::check(op);
  } else {
    return "";
  }
}

}  // namespace qbc::isa
