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

void lower_linear(const Node& n, int id, CoreLowering& L) {
  const int c = L.c, P = L.P;
  const int64_t cap = L.cap;
  const int32_t pass = L.cx.pass_id("lower-projections");
  const LinearInfo& li = L.cx.plan.lin[id];
  const ValueLoc& x = L.cx.plan.loc[static_cast<size_t>(n.operands[0].value)];
  const ValueLoc& y = L.cx.plan.loc[static_cast<size_t>(id)];
  const int64_t a = c * li.ntiles / P, b = (c + 1) * li.ntiles / P;
  if (a == b) return;  // more cores than channel tiles: this core waits at the barrier
  const int64_t mt = std::min(li.t.mt, cap), nt = li.t.nt, K = li.k;
  const DType xt = li.in_bits == 16 ? DType::kI16 : DType::kI8;
  const DType wt = isa::code_type(li.w_bits);
  const DType acct = li.in_bits == 16 ? DType::kI64 : DType::kI32;
  const DType yt = li.out_fp16 ? DType::kF16 : DType::kF32;
  const int64_t cb = isa::dtype_bytes(xt, 1), yb = isa::dtype_bytes(yt, 1);
  const int64_t accb = isa::dtype_bytes(acct, 1);
  // Slots of the scale and zero-point buffers keep the fp32 / int32 size (the footprints of
  // matmul and requant); the compact image moves fewer bytes into them (compact_weights.h).
  const bool compact = compact_weights(n, li);
  const int64_t sblk = align_up(nt * li.gt * 4, L.cx.o.target.dma_align);
  const int64_t sbytes = scale_block_bytes(li, compact, L.cx.o.target.dma_align);
  const int64_t zbytes = zero_block_bytes(li, compact, L.cx.o.target.dma_align);
  SramStage sram = L.sram(n.name);
  const int32_t x16 = sram.alloc("x", DType::kF16, mt * K * 2, {mt, K});
  const int32_t codes = sram.alloc("codes", xt, mt * K * cb, {mt, K});
  const int32_t xs = sram.alloc("xscale", DType::kF32, mt * 4, {mt});
  const int32_t xz = sram.alloc("xzero", DType::kI32, mt * 4, {mt});
  const int32_t wbuf = sram.alloc("w", wt, 2 * li.w_bytes, {2, nt, li.t.kt});
  const int32_t wsb = sram.alloc("wscale", scale_type(compact), 2 * sblk, {2, nt, li.gt});
  const int32_t wzb =
      li.zero ? sram.alloc("wzero", zero_type(compact), 2 * sblk, {2, nt, li.gt}) : -1;
  const int32_t bb = li.bias ? sram.alloc("bias", DType::kF32, 2 * nt * 4, {2, nt}) : -1;
  const int32_t acc = sram.alloc("acc", acct, mt * nt * li.gt * accb, {mt, nt, li.gt});
  const int32_t fsum = sram.alloc("fsum", DType::kF32, mt * nt * 4, {mt, nt});
  const int32_t ybuf = sram.alloc("y", yt, 2 * mt * nt * yb, {2, mt, nt});
  const int var = L.s.begin_loop(Expr::sym(Sym::kSeq).ceildiv(Expr(mt)), id, pass);
  const Expr row0 = Expr::loop(var) * Expr(mt);
  const Expr rows = (Expr::sym(Sym::kSeq) - row0).min(Expr(mt));
  ValueLoc xin = x;
  L.s.emit(L.load_rows(xin, x16, row0, rows), Queue::kLoad, id, pass);
  isa::Quantize q;
  q.x = ref(x16);
  q.codes = ref(codes);
  q.scale = ref(xs);
  q.zero = ref(xz);
  q.rows = rows;
  q.k = K;
  q.bits = li.in_bits;
  q.mode = li.mode;
  q.static_scale = li.in_scale;
  q.static_zero = li.in_zero;
  L.s.emit(q, Queue::kCompute, id, pass);
  auto block_load = [&](int32_t dst, int64_t dst_off, int64_t src_off, int64_t bytes) {
    isa::Dma d;
    d.dst = ref(dst, Expr(dst_off));
    d.src = ref(li.buf, Expr(src_off));
    d.row_bytes = bytes;
    d.dst_stride = d.src_stride = bytes;
    L.s.emit(d, Queue::kLoad, id, pass);
  };
  int64_t wcount = 0;
  for (int64_t ti = a; ti < b; ++ti) {
    const int64_t u = ti - a, p = u % 2;
    const int64_t ntw = std::min(nt, li.n - ti * nt);
    if (li.bias) block_load(bb, p * nt * 4, li.b_off[static_cast<size_t>(ti)], nt * 4);
    if (li.group == 0) {
      block_load(wsb, p * sblk, li.ws_off[static_cast<size_t>(ti)], sbytes);
      if (li.zero) block_load(wzb, p * sblk, li.wz_off[static_cast<size_t>(ti)], zbytes);
    }
    for (int64_t kt = 0; kt < li.ktiles; ++kt, ++wcount) {
      const int64_t wp = wcount % 2;
      const int64_t k0 = kt * li.t.kt, kn = std::min(li.t.kt, K - k0);
      block_load(wbuf, wp * li.w_bytes, li.w_off[static_cast<size_t>(ti * li.ktiles + kt)],
                 li.w_bytes);
      const int64_t sp = li.group > 0 ? wp : p;
      if (li.group > 0) {
        block_load(wsb, wp * sblk, li.ws_off[static_cast<size_t>(ti * li.ktiles + kt)], sbytes);
        if (li.zero)
          block_load(wzb, wp * sblk, li.wz_off[static_cast<size_t>(ti * li.ktiles + kt)], zbytes);
      }
      const int64_t gt = li.group > 0 ? cdiv(kn, li.group) : 1;
      isa::MatMul m;
      m.x = ref(codes, Expr(k0 * cb));
      m.xzero = ref(xz);
      m.w = ref(wbuf, Expr(wp * li.w_bytes));
      if (li.zero) m.wzero = ref(wzb, Expr(sp * sblk));
      m.acc = ref(acc);
      m.rows = rows;
      m.n = nt;
      m.kt = kn;
      m.ldx = K;
      m.group = li.group;
      m.xtype = xt;
      m.wtype = wt;
      m.acctype = acct;
      m.accumulate = li.group == 0 && kt > 0;
      L.s.emit(m, Queue::kCompute, id, pass);
      if (li.group > 0 || kt == li.ktiles - 1) {
        isa::Requant r;
        r.acc = ref(acc);
        r.xscale = ref(xs);
        r.wscale = ref(wsb, Expr(sp * sblk));
        r.fsum = ref(fsum);
        if (li.bias) r.bias = ref(bb, Expr(p * nt * 4));
        r.y = ref(ybuf, Expr(p * mt * nt * yb));
        r.rows = rows;
        r.n = nt;
        r.gt = gt;
        r.ws_stride = gt;
        r.ldy = nt;
        r.acctype = acct;
        r.ytype = yt;
        r.first = li.group == 0 || kt == 0;
        r.last = kt == li.ktiles - 1;
        L.s.emit(r, Queue::kCompute, id, pass);
      }
    }
    isa::Dma st;
    st.src = ref(ybuf, Expr(p * mt * nt * yb));
    st.dst = ref(y.buf, Expr(y.col + ti * nt * yb) + row0 * Expr(y.stride));
    st.rows = rows;
    st.row_bytes = ntw * yb;
    st.src_stride = nt * yb;
    st.dst_stride = y.stride;
    L.s.emit(st, Queue::kStore, id, pass);
  }
  L.s.end_loop();
}

}  // namespace qbc::npu
