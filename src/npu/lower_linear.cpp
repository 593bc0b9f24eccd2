// The lowering of qlinear (docs/npu.md "Lowering"): each core takes a contiguous range of
// output-channel tiles; per activation row tile it quantizes the inputs once, then streams
// its channel tiles' K tiles through double-buffered weight, scale and bias blocks, with the
// integer matmul and the requantization per tile.
#include <algorithm>
#include <string>

#include "backend.h"
#include "compact_weights.h"
#include "lowering.h"

namespace qbc::npu {

using ir::Node;
using isa::DType;
using isa::Expr;
using isa::Queue;
using isa::Sym;

namespace {

/// One qlinear lowered on one core: its SRAM stage, then per activation row tile the input
/// quantization and the core's channel tiles, each streamed through its K tiles.
class LinearLowering {
 public:
  /// `n` and `li`: the node and its linear plan as this program reads them (the second
  /// weight image's when it is this phase's).
  LinearLowering(const Node& n, const LinearPlan& li, int id, CoreLowering& L)
      : id_(id),
        L_(L),
        np_(L.cx.plan.nodes[static_cast<size_t>(id)]),
        li_(li),
        x_(L.cx.plan.nodes[static_cast<size_t>(n.operands[0].value)].place),
        y_(np_.place),
        mt_(std::min(li_.t.mt, L.cap)),
        nt_(li_.t.nt),
        xt_(li_.in_bits == 16 ? DType::kI16 : DType::kI8),
        wt_(isa::code_type(li_.w_bits)),
        acct_(li_.in_bits == 16 ? DType::kI64 : DType::kI32),
        yt_(li_.out_fp16 ? DType::kF16 : DType::kF32),
        cb_(isa::dtype_bytes(xt_, 1)),
        yb_(isa::dtype_bytes(yt_, 1)),
        sblk_(align_up(nt_ * li_.gt * 4, L.cx.o.target.dma_align)),
        compact_(compact_weights(n, li_)),
        sbytes_(scale_block_bytes(li_, compact_, L.cx.o.target.dma_align)),
        zbytes_(zero_block_bytes(li_, compact_, L.cx.o.target.dma_align)),
        pass_(L.cx.pass_id("lower-projections")) {}

  /// Channel tiles [a, b) of this core (a contiguous range; none: the core only waits).
  void run(const std::string& name, int64_t a, int64_t b);

 private:
  void alloc(const std::string& name);
  void quantize(const Expr& row0, const Expr& rows);
  void block_load(int32_t dst, int64_t dst_off, int64_t src_off, int64_t bytes);
  void channel_tile(int64_t ti, int64_t p, const Expr& row0, const Expr& rows);
  void k_tile(int64_t ti, int64_t kt, int64_t p, const Expr& rows);

  const int id_;
  CoreLowering& L_;
  const NodePlan& np_;
  const LinearPlan& li_;
  const ValueLoc& x_;
  const ValueLoc& y_;
  const int64_t mt_, nt_;
  const DType xt_, wt_, acct_, yt_;
  const int64_t cb_, yb_, sblk_;
  // Slots of the scale and zero-point buffers keep the fp32 / int32 size (the footprints of
  // matmul and requant); the compact image moves fewer bytes into them (compact_weights.h).
  const bool compact_;
  const int64_t sbytes_, zbytes_;
  const int32_t pass_;
  int32_t x16_ = -1, codes_ = -1, xs_ = -1, xz_ = -1, wbuf_ = -1, wsb_ = -1, wzb_ = -1, bb_ = -1;
  int32_t wmb_ = -1, xsum_ = -1;  // float offsets (GGUF Q4_1 / Q5_1) and the code sums
  int32_t acc_ = -1, fsum_ = -1, ybuf_ = -1;
  int64_t wcount_ = 0;  // weight blocks loaded so far: their buffer half alternates
};

void LinearLowering::alloc(const std::string& name) {
  const int64_t mt = mt_, nt = nt_, K = li_.k, gt = li_.gt;
  SramStage sram = L_.sram(name, np_.stage);
  x16_ = sram.alloc("x", x_.type, isa::dtype_bytes(x_.type, mt * K), {mt, K});
  codes_ = sram.alloc("codes", xt_, mt * K * cb_, {mt, K});
  xs_ = sram.alloc("xscale", DType::kF32, mt * 4, {mt});
  xz_ = sram.alloc("xzero", DType::kI32, mt * 4, {mt});
  wbuf_ = sram.alloc("w", wt_, 2 * li_.w_bytes, {2, nt, li_.t.kt});
  wsb_ = sram.alloc("wscale", scale_type(compact_), 2 * sblk_, {2, nt, gt});
  if (li_.zero) wzb_ = sram.alloc("wzero", zero_type(compact_, li_.w_bits), 2 * sblk_, {2, nt, gt});
  if (li_.min) {
    wmb_ = sram.alloc("wmin", scale_type(compact_), 2 * sblk_, {2, nt, gt});
    xsum_ = sram.alloc("xsum", acct_, mt * gt * isa::dtype_bytes(acct_, 1), {mt, gt});
  }
  if (li_.bias) bb_ = sram.alloc("bias", DType::kF32, 2 * nt * 4, {2, nt});
  acc_ = sram.alloc("acc", acct_, mt * nt * gt * isa::dtype_bytes(acct_, 1), {mt, nt, gt});
  fsum_ = sram.alloc("fsum", DType::kF32, mt * nt * 4, {mt, nt});
  ybuf_ = sram.alloc("y", yt_, 2 * mt * nt * yb_, {2, mt, nt});
}

/// The row tile's fp16 inputs, quantized once for every channel tile.
void LinearLowering::quantize(const Expr& row0, const Expr& rows) {
  L_.s.emit(L_.load_rows(x_, x16_, row0, rows), Queue::kLoad, id_, pass_);
  isa::Quantize q;
  q.x = ref(x16_);
  q.codes = ref(codes_);
  q.scale = ref(xs_);
  q.zero = ref(xz_);
  q.rows = rows;
  q.k = li_.k;
  q.bits = li_.in_bits;
  q.mode = li_.mode;
  q.static_scale = li_.in_scale;
  q.static_zero = li_.in_zero;
  q.x_f32 = x_.type == DType::kF32;  // a head value kept in fp32 (a vision projector)
  L_.s.emit(q, Queue::kCompute, id_, pass_);
}

void LinearLowering::block_load(int32_t dst, int64_t dst_off, int64_t src_off, int64_t bytes) {
  isa::Dma d;
  d.dst = ref(dst, Expr(dst_off));
  d.src = ref(li_.buf, Expr(src_off));
  d.row_bytes = bytes;
  d.dst_stride = d.src_stride = bytes;
  L_.s.emit(d, Queue::kLoad, id_, pass_);
}

/// K tile `kt` of channel tile `ti` (bias and ungrouped scales in half `p`): its weight
/// block (and grouped scales) into the next half, the matmul, and the requantization of
/// each group, or of the whole row after the last K tile.
void LinearLowering::k_tile(int64_t ti, int64_t kt, int64_t p, const Expr& rows) {
  const int64_t wp = wcount_++ % 2;
  const int64_t K = li_.k, k0 = kt * li_.t.kt, kn = std::min(li_.t.kt, K - k0);
  const size_t blk = static_cast<size_t>(ti * li_.ktiles + kt);
  block_load(wbuf_, wp * li_.w_bytes, li_.w_off[blk], li_.w_bytes);
  const int64_t sp = li_.group > 0 ? wp : p;
  if (li_.group > 0) {
    block_load(wsb_, wp * sblk_, li_.ws_off[blk], sbytes_);
    if (li_.zero) block_load(wzb_, wp * sblk_, li_.wz_off[blk], zbytes_);
    if (li_.min) block_load(wmb_, wp * sblk_, li_.wm_off[blk], sbytes_);
  }
  const int64_t gt = li_.group > 0 ? cdiv(kn, li_.group) : 1;
  isa::MatMul m;
  m.x = ref(codes_, Expr(k0 * cb_));
  m.xzero = ref(xz_);
  m.w = ref(wbuf_, Expr(wp * li_.w_bytes));
  if (li_.zero) m.wzero = ref(wzb_, Expr(sp * sblk_));
  m.acc = ref(acc_);
  m.rows = rows;
  m.n = nt_;
  m.kt = kn;
  m.ldx = K;
  m.group = li_.group;
  m.xtype = xt_;
  m.wtype = wt_;
  m.acctype = acct_;
  m.accumulate = li_.group == 0 && kt > 0;
  if (li_.min) m.xsum = ref(xsum_);
  L_.s.emit(m, Queue::kCompute, id_, pass_);
  if (li_.group == 0 && kt != li_.ktiles - 1) return;
  isa::Requant r;
  r.acc = ref(acc_);
  r.xscale = ref(xs_);
  r.wscale = ref(wsb_, Expr(sp * sblk_));
  r.fsum = ref(fsum_);
  if (li_.bias) r.bias = ref(bb_, Expr(p * nt_ * 4));
  r.y = ref(ybuf_, Expr(p * mt_ * nt_ * yb_));
  r.rows = rows;
  r.n = nt_;
  r.gt = gt;
  r.ws_stride = gt;
  r.ldy = nt_;
  r.acctype = acct_;
  r.ytype = yt_;
  r.first = li_.group == 0 || kt == 0;
  r.last = kt == li_.ktiles - 1;
  if (li_.min) {
    r.xsum = ref(xsum_);
    r.wmin = ref(wmb_, Expr(sp * sblk_));
  }
  L_.s.emit(r, Queue::kCompute, id_, pass_);
}

/// Channel tile `ti` into half `p` of the bias, scale and output buffers: its K tiles, then
/// the store of its columns.
void LinearLowering::channel_tile(int64_t ti, int64_t p, const Expr& row0, const Expr& rows) {
  const size_t t = static_cast<size_t>(ti);
  if (li_.bias) block_load(bb_, p * nt_ * 4, li_.b_off[t], nt_ * 4);
  if (li_.group == 0) {
    block_load(wsb_, p * sblk_, li_.ws_off[t], sbytes_);
    if (li_.zero) block_load(wzb_, p * sblk_, li_.wz_off[t], zbytes_);
  }
  for (int64_t kt = 0; kt < li_.ktiles; ++kt) k_tile(ti, kt, p, rows);
  const int64_t ntw = std::min(nt_, li_.n - ti * nt_);
  isa::Dma st;
  st.src = ref(ybuf_, Expr(p * mt_ * nt_ * yb_));
  st.dst = ref(y_.buf, Expr(y_.col + ti * nt_ * yb_) + row0 * Expr(y_.stride));
  st.rows = rows;
  st.row_bytes = ntw * yb_;
  st.src_stride = nt_ * yb_;
  st.dst_stride = y_.stride;
  L_.s.emit(st, Queue::kStore, id_, pass_);
}

void LinearLowering::run(const std::string& name, int64_t a, int64_t b) {
  alloc(name);
  const Expr all = L_.rows(id_);
  const int var = L_.s.begin_loop(all.ceildiv(Expr(mt_)), id_, pass_);
  const Expr row0 = Expr::loop(var) * Expr(mt_);
  const Expr rows = (all - row0).min(Expr(mt_));
  quantize(row0, rows);
  for (int64_t ti = a; ti < b; ++ti) channel_tile(ti, (ti - a) % 2, row0, rows);
  L_.s.end_loop();
}

}  // namespace

Status lower_linear(const Node& n, int id, CoreLowering& L) {
  const NodePlan& np = L.cx.plan.nodes[static_cast<size_t>(id)];
  const LinearPlan& li = np.linear_for(L.phase);
  const int64_t a = L.c * li.ntiles / L.P, b = (L.c + 1) * li.ntiles / L.P;
  if (a == b) return ok_status();  // more cores than channel tiles: this core waits
  if (&li == &np.linear) {
    LinearLowering(n, li, id, L).run(n.name, a, b);
  } else {  // the second weight image: the node as this phase sees it
    QBC_ASSIGN_OR_RETURN(const Node view, second_image_node(n, np));
    LinearLowering(view, li, id, L).run(n.name, a, b);
  }
  return ok_status();
}

}  // namespace qbc::npu
