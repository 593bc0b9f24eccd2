// The lowering of attention (docs/npu.md "Lowering"), two stages per node:
// 1. the KV append: this call's keys and values quantized and stored into the cache rings
//    (row tiles round-robin);
// 2. attention over the cache: query row tiles of br rows, cache chunks of bc positions dealt
//    round-robin to the cores; pass A takes the exact row max, pass B the integer exponent
//    sums and P·V; partials merge across cores through DRAM scratch, and the owner of each
//    block of KV heads normalises and stores it.
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "backend.h"
#include "lowering.h"

namespace qbc::npu {
namespace {

using ir::Node;
using isa::DType;
using isa::Expr;
using isa::Queue;
using isa::Sym;

/// One attention node lowered on one core.
class AttentionLowering {
 public:
  AttentionLowering(const Node& n, int id, CoreLowering& L)
      : n_(n),
        id_(id),
        L_(L),
        np_(L.cx.plan.nodes[static_cast<size_t>(id)]),
        ai_(np_.attention),
        d_(L.cx.b.attentions[static_cast<size_t>(ai_.desc)]),
        H_(d_.heads),
        KV_(d_.kv_heads),
        hd_(d_.head_dim),
        g_(H_ / KV_),
        kt_(isa::code_type(d_.k_bits)),
        vt_(isa::code_type(d_.v_bits)),
        kr_(d_.key_record()),
        vr_(d_.value_record()),
        slots_(kv_slots(ai_, d_)) {}

  void append();
  /// append() of a packed cache (isa::AttnDesc::packed).
  void append_packed();
  void attend();
  /// full_attention with segments (window attention): per segment [lo, hi), its query row
  /// tiles scan keys [lo, hi) under the descriptor whose window is the segment's length.
  void attend_segments(const std::vector<int64_t>& segments);

 private:
  void load_params(int32_t dst, int32_t pass);
  isa::KvQuant kv_quant(int32_t k16, int32_t v16, int32_t kc, int32_t vc, int32_t prm,
                        const Expr& rows, const Expr& pos0) const;
  void alloc_attend();
  void prepare_queries(const Expr& rows);
  void chunk_loop(int64_t h, bool with_v, isa::MaxMode mode, const Expr& rows, const Expr& qpos0);
  void chunk_dma(int32_t dst, int64_t bytes, int32_t cache, int64_t row, int64_t record, int64_t h,
                 const Expr& par, const Expr& kpos0);
  void block_dma(bool store, int32_t sram_buf, int64_t head_bytes, int32_t cache, int64_t record,
                 int64_t h, int64_t block, const Expr& b0, const Expr& nb);
  void scratch_dma(bool store, int32_t sram_buf, int64_t dram_off, int64_t bytes, int64_t parts,
                   int64_t stride);
  void merge_max();
  void store_sums();
  void outputs(const Expr& row0, const Expr& rows);
  const ValueLoc& loc(int value) const {
    return L_.cx.plan.nodes[static_cast<size_t>(value)].place;
  }

  const Node& n_;
  const int id_;
  CoreLowering& L_;
  const NodePlan& np_;
  const AttentionPlan& ai_;
  const isa::AttnDesc& d_;
  const int64_t H_, KV_, hd_, g_;
  const DType kt_, vt_;
  /// Bytes of one stored key / value of a KV head (its codes, then the KV4 rules' fields).
  const int64_t kr_, vr_;
  /// Records per KV head in the DRAM caches (kv_slots).
  const int64_t slots_;
  const Expr start_ = Expr::sym(Sym::kStart), seq_ = Expr::sym(Sym::kSeq);
  int32_t pass_ = -1;
  // Stage 2's tiles and SRAM buffers.
  int64_t br_ = 1, bc_ = 16, rg_ = 1, kbytes_ = 0, vbytes_ = 0;
  int64_t mstride_ = 0, sstride_ = 0, sum_base_ = 0;
  int32_t qt_ = -1, yt_ = -1, prm_ = -1, kb_ = -1, vb_ = -1, sc_ = -1;
  int32_t mparts_ = -1, sparts_ = -1;
  std::vector<int32_t> qc_, mq_, rmax_, sum_;
  Expr chunk_first_ = Expr(0), chunk_trip_ = Expr(0);
  int32_t qk_attn_ = -1;  ///< qk_scores' descriptor when not the node's (a segment's window)
};

void AttentionLowering::load_params(int32_t dst, int32_t pass) {
  isa::Dma dm;
  dm.dst = ref(dst);
  dm.src = ref(ai_.params);
  dm.row_bytes = ai_.params_bytes;
  dm.dst_stride = dm.src_stride = dm.row_bytes;
  L_.s.emit(dm, Queue::kLoad, id_, pass);
}

/// kv_quant of this node's rows [pos0, pos0 + rows) from the fp16 K and V tiles into kc, vc.
isa::KvQuant AttentionLowering::kv_quant(int32_t k16, int32_t v16, int32_t kc, int32_t vc,
                                         int32_t prm, const Expr& rows, const Expr& pos0) const {
  isa::KvQuant q;
  q.k = ref(k16);
  q.v = ref(v16);
  q.kcodes = ref(kc);
  q.vcodes = ref(vc);
  q.params = ref(prm);
  q.rows = rows;
  q.pos0 = pos0;
  q.attn = ai_.desc;
  return q;
}

void AttentionLowering::append() {
  const int32_t pass_kv = L_.cx.pass_id("lower-kv-append");
  pass_ = L_.cx.pass_id("lower-attention");
  if (d_.packed) return append_packed();
  const int c = L_.c, P = L_.P;
  const int64_t kvw = KV_ * hd_;
  const int64_t mt = std::min(ai_.append_mt, L_.cap);
  SramStage sram = L_.sram(n_.name + ".append", np_.stage);
  const int32_t k16 = sram.alloc("k", DType::kF16, mt * kvw * 2, {mt, kvw});
  const int32_t v16 = sram.alloc("v", DType::kF16, mt * kvw * 2, {mt, kvw});
  // Per row, the records of every KV head in order (KV8: a row of codes).
  const int32_t kc = sram.alloc("kcodes", kt_, mt * KV_ * kr_, {mt, kvw});
  const int32_t vc = sram.alloc("vcodes", vt_, mt * KV_ * vr_, {mt, kvw});
  const int32_t prm = sram.alloc("params", DType::kF32, ai_.params_bytes, {ai_.params_bytes / 4});
  load_params(prm, pass_kv);
  const int var = L_.s.begin_loop(round_robin_trip(Expr::sym(Sym::kSeq), mt, c, P), id_, pass_kv);
  const Expr row0 = (Expr(c) + Expr(P) * Expr::loop(var)) * Expr(mt);
  const Expr rows = (seq_ - row0).min(Expr(mt));
  L_.s.emit(L_.load_rows(loc(n_.operands[1].value), k16, row0, rows), Queue::kLoad, id_, pass_kv);
  L_.s.emit(L_.load_rows(loc(n_.operands[2].value), v16, row0, rows), Queue::kLoad, id_, pass_kv);
  L_.s.emit(kv_quant(k16, v16, kc, vc, prm, rows, start_ + row0), Queue::kCompute, id_, pass_kv);
  for (int64_t h = 0; h < KV_; ++h) {
    for (int which = 0; which < 2; ++which) {
      const int64_t record = which == 0 ? kr_ : vr_;
      isa::Dma st;
      st.src = ref(which == 0 ? kc : vc, Expr(h * record));
      st.dst = ref(which == 0 ? ai_.kcache : ai_.vcache,
                   Expr(h * slots_ * (which == 0 ? ai_.krow : ai_.vrow)));
      st.rows = rows;
      st.row_bytes = record;
      st.src_stride = KV_ * record;
      st.ring_rows = d_.capacity;
      st.ring_stride = which == 0 ? ai_.krow : ai_.vrow;
      st.ring_row0 = start_ + row0;
      L_.s.emit(st, Queue::kStore, id_, pass_kv);
    }
  }
  L_.s.end_loop();
}

/// A packed cache's append, on core 0 alone (neighbouring row tiles share a block): per row
/// tile, each KV head's blocks covering positions [p0, p0 + rows) are loaded, kv_quant writes
/// the rows' records into them (record p0 mod block of the first), and they are stored back
/// whole, so every DRAM access is of aligned blocks.
void AttentionLowering::append_packed() {
  const int32_t pass_kv = L_.cx.pass_id("lower-kv-append");
  if (L_.c != 0) return;
  const int64_t kvw = KV_ * hd_;
  const int64_t mt = std::min(ai_.append_mt, L_.cap);
  const int64_t B = kv_block(d_, L_.cx.o.target.dma_align);
  const int64_t hs = align_up(mt, B) + B;  // records per head: every block rows can touch
  SramStage sram = L_.sram(n_.name + ".append", np_.stage);
  const int32_t k16 = sram.alloc("k", DType::kF16, mt * kvw * 2, {mt, kvw});
  const int32_t v16 = sram.alloc("v", DType::kF16, mt * kvw * 2, {mt, kvw});
  const int32_t kc = sram.alloc("kblocks", kt_, KV_ * hs * kr_, {KV_, hs, hd_});
  const int32_t vc = sram.alloc("vblocks", vt_, KV_ * hs * vr_, {KV_, hs, hd_});
  const int32_t prm = sram.alloc("params", DType::kF32, ai_.params_bytes, {ai_.params_bytes / 4});
  load_params(prm, pass_kv);
  const int var = L_.s.begin_loop(seq_.ceildiv(Expr(mt)), id_, pass_kv);
  const Expr row0 = Expr::loop(var) * Expr(mt);
  const Expr rows = (seq_ - row0).min(Expr(mt));
  const Expr p0 = start_ + row0;
  const Expr b0 = p0.floordiv(Expr(B));
  const Expr nb = (p0 + rows - Expr(1)).floordiv(Expr(B)) - b0 + Expr(1);
  L_.s.emit(L_.load_rows(loc(n_.operands[1].value), k16, row0, rows), Queue::kLoad, id_, pass_kv);
  L_.s.emit(L_.load_rows(loc(n_.operands[2].value), v16, row0, rows), Queue::kLoad, id_, pass_kv);
  for (int64_t h = 0; h < KV_; ++h) {
    block_dma(false, kc, hs * kr_, ai_.kcache, kr_, h, B, b0, nb);
    block_dma(false, vc, hs * vr_, ai_.vcache, vr_, h, B, b0, nb);
  }
  isa::KvQuant q = kv_quant(k16, v16, kc, vc, prm, rows, p0);
  q.head_stride = hs;
  q.rec0 = p0 - b0 * Expr(B);
  L_.s.emit(q, Queue::kCompute, id_, pass_kv);
  for (int64_t h = 0; h < KV_; ++h) {
    block_dma(true, kc, hs * kr_, ai_.kcache, kr_, h, B, b0, nb);
    block_dma(true, vc, hs * vr_, ai_.vcache, vr_, h, B, b0, nb);
  }
  L_.s.end_loop();
}

/// Blocks b0 .. b0 + nb − 1 of KV head h's packed cache (a ring of slots / block blocks of
/// `block` records) to or from the head's part of an SRAM buffer.
void AttentionLowering::block_dma(bool store, int32_t sram_buf, int64_t head_bytes, int32_t cache,
                                  int64_t record, int64_t h, int64_t block, const Expr& b0,
                                  const Expr& nb) {
  isa::Dma dm;
  const isa::Ref s = ref(sram_buf, Expr(h * head_bytes));
  const isa::Ref d = ref(cache, Expr(h * slots_ * record));
  dm.src = store ? s : d;
  dm.dst = store ? d : s;
  dm.rows = nb;
  dm.row_bytes = block * record;
  dm.dst_stride = dm.src_stride = dm.row_bytes;
  dm.ring_rows = slots_ / block;
  dm.ring_stride = dm.row_bytes;
  dm.ring_row0 = b0;
  L_.s.emit(dm, store ? Queue::kStore : Queue::kLoad, id_, L_.cx.pass_id("lower-kv-append"));
}

void AttentionLowering::alloc_attend() {
  br_ = std::min(ai_.t.br, L_.cap);
  bc_ = ai_.t.bc;
  rg_ = br_ * g_;
  SramStage sram = L_.sram(n_.name, np_.stage + 1);
  qt_ = sram.alloc("q", DType::kF16, br_ * H_ * hd_ * 2, {br_, H_ * hd_});
  yt_ = sram.alloc("y", DType::kF16, br_ * H_ * hd_ * 2, {br_, H_ * hd_});
  prm_ = sram.alloc("params", DType::kF32, ai_.params_bytes, {ai_.params_bytes / 4});
  kbytes_ = bc_ * kr_;
  vbytes_ = bc_ * vr_;
  kb_ = sram.alloc("kchunk", kt_, 2 * kbytes_, {2, bc_, hd_});
  vb_ = sram.alloc("vchunk", vt_, 2 * vbytes_, {2, bc_, hd_});
  sc_ = sram.alloc("scores", DType::kF32, rg_ * bc_ * 4, {rg_, bc_});
  for (int64_t h = 0; h < KV_; ++h) {
    const std::string hs = std::to_string(h);
    qc_.push_back(sram.alloc("qcodes" + hs, DType::kI32, rg_ * hd_ * 4, {rg_, hd_}));
    mq_.push_back(sram.alloc("mq" + hs, DType::kF32, rg_ * 4, {rg_}));
    rmax_.push_back(sram.alloc("rowmax" + hs, DType::kF32, rg_ * 4, {rg_}));
    sum_.push_back(sram.alloc("sums" + hs, DType::kI64, rg_ * (hd_ + 1) * 8, {rg_, hd_ + 1}));
  }
  const int64_t A = L_.cx.o.target.dma_align;
  mstride_ = align_up(rg_ * 4, A);
  sstride_ = align_up(rg_ * (hd_ + 1) * 8, A);
  sum_base_ = static_cast<int64_t>(L_.cx.o.target.cores()) * KV_ * mstride_;
  const int64_t P = L_.P;
  if (P > 1) {
    mparts_ = sram.alloc("max_parts", DType::kF32, P * rg_ * 4, {P, rg_});
    sparts_ = sram.alloc("sum_parts", DType::kI64, P * rg_ * (hd_ + 1) * 8, {P, rg_, hd_ + 1});
  }
}

void AttentionLowering::prepare_queries(const Expr& rows) {
  for (int64_t h = 0; h < KV_; ++h) {
    const size_t hi = static_cast<size_t>(h);
    isa::QueryPrep qp;
    qp.q = ref(qt_, Expr(h * g_ * hd_ * 2));
    qp.params = ref(prm_);
    qp.qcodes = ref(qc_[hi]);
    qp.mq = ref(mq_[hi]);
    qp.rows = rows;
    qp.kv_head = h;
    qp.attn = ai_.desc;
    L_.s.emit(qp, Queue::kCompute, id_, pass_);
    L_.s.emit(
        isa::Fill{ref(rmax_[hi]), Expr(rg_), DType::kF32, -std::numeric_limits<double>::infinity()},
        Queue::kCompute, id_, pass_);
    L_.s.emit(isa::Fill{ref(sum_[hi]), Expr(rg_ * (hd_ + 1)), DType::kI64, 0.0}, Queue::kCompute,
              id_, pass_);
  }
}

void AttentionLowering::chunk_dma(int32_t dst, int64_t bytes, int32_t cache, int64_t row,
                                  int64_t record, int64_t h, const Expr& par, const Expr& kpos0) {
  isa::Dma dm;
  dm.dst = ref(dst, par * Expr(bytes));
  dm.src = ref(cache, Expr(h * slots_ * row));
  if (d_.packed) {  // bc dense records, one aligned row of a ring of chunks
    dm.rows = Expr(1);
    dm.row_bytes = bc_ * record;
    dm.dst_stride = dm.row_bytes;
    dm.ring_rows = slots_ / bc_;
    dm.ring_stride = dm.row_bytes;
    dm.ring_row0 = kpos0.floordiv(Expr(bc_));
    L_.s.emit(dm, Queue::kLoad, id_, pass_);
    return;
  }
  dm.rows = Expr(bc_);
  dm.row_bytes = record;
  dm.dst_stride = dm.row_bytes;
  dm.ring_rows = d_.capacity;
  dm.ring_stride = row;
  dm.ring_row0 = kpos0;
  L_.s.emit(dm, Queue::kLoad, id_, pass_);
}

void AttentionLowering::chunk_loop(int64_t h, bool with_v, isa::MaxMode mode, const Expr& rows,
                                   const Expr& qpos0) {
  const size_t hi = static_cast<size_t>(h);
  const int cv = L_.s.begin_loop(chunk_trip_, id_, pass_);
  const Expr j = chunk_first_ + Expr(L_.c) + Expr(L_.P) * Expr::loop(cv);
  const Expr kpos0 = j * Expr(bc_);
  const Expr par = Expr::loop(cv).mod(Expr(2));
  chunk_dma(kb_, kbytes_, ai_.kcache, ai_.krow, kr_, h, par, kpos0);
  if (with_v) chunk_dma(vb_, vbytes_, ai_.vcache, ai_.vrow, vr_, h, par, kpos0);
  isa::QkScores qk;
  qk.qcodes = ref(qc_[hi]);
  qk.mq = ref(mq_[hi]);
  qk.q = ref(qt_, Expr(h * g_ * hd_ * 2));
  qk.kcodes = ref(kb_, par * Expr(kbytes_));
  qk.params = ref(prm_);
  qk.scores = ref(sc_);
  qk.rowmax = ref(rmax_[hi]);
  qk.rows = rows;
  qk.qpos0 = qpos0;
  qk.kpos0 = kpos0;
  qk.bc = bc_;
  qk.kv_head = h;
  qk.max_mode = mode;
  qk.attn = qk_attn_ >= 0 ? qk_attn_ : ai_.desc;
  qk.span = L_.span;
  L_.s.emit(qk, Queue::kCompute, id_, pass_);
  if (with_v) {
    isa::ExpAccum e;
    e.scores = ref(sc_);
    e.rowmax = ref(rmax_[hi]);
    e.vcodes = ref(vb_, par * Expr(vbytes_));
    e.esum = ref(sum_[hi]);
    e.acc = ref(sum_[hi], Expr(rg_ * 8));
    e.rows = rows;
    e.bc = bc_;
    e.attn = ai_.desc;
    L_.s.emit(e, Queue::kCompute, id_, pass_);
  }
  L_.s.end_loop();
}

void AttentionLowering::scratch_dma(bool store, int32_t sram_buf, int64_t dram_off, int64_t bytes,
                                    int64_t parts, int64_t stride) {
  isa::Dma dm;
  if (store) {
    dm.src = ref(sram_buf);
    dm.dst = ref(L_.cx.plan.scratch, Expr(dram_off));
  } else {
    dm.dst = ref(sram_buf);
    dm.src = ref(L_.cx.plan.scratch, Expr(dram_off));
  }
  dm.rows = Expr(parts);
  dm.row_bytes = bytes;
  (store ? dm.dst_stride : dm.src_stride) = stride;
  (store ? dm.src_stride : dm.dst_stride) = bytes;
  L_.s.emit(dm, store ? Queue::kStore : Queue::kLoad, id_, pass_);
}

/// Pass A's partial row maxes of every core, merged into each core's exact row max.
void AttentionLowering::merge_max() {
  const int64_t c = L_.c, P = L_.P;
  for (int64_t h = 0; h < KV_; ++h) {
    scratch_dma(true, rmax_[static_cast<size_t>(h)], (c * KV_ + h) * mstride_, rg_ * 4, 1,
                mstride_);
  }
  L_.barrier(id_);
  for (int64_t h = 0; h < KV_; ++h) {
    scratch_dma(false, mparts_, h * mstride_, rg_ * 4, P, KV_ * mstride_);
    isa::Merge m;
    m.op = isa::MergeOp::kMax;
    m.parts = ref(mparts_);
    m.out = ref(rmax_[static_cast<size_t>(h)]);
    m.parts_count = P;
    m.count = rg_;
    m.part_stride = rg_;
    L_.s.emit(m, Queue::kCompute, id_, pass_);
  }
}

/// Pass B's partial sums of this core, to scratch for the owners of the outputs.
void AttentionLowering::store_sums() {
  const int64_t c = L_.c;
  for (int64_t h = 0; h < KV_; ++h) {
    scratch_dma(true, sum_[static_cast<size_t>(h)], sum_base_ + (c * KV_ + h) * sstride_,
                rg_ * (hd_ + 1) * 8, 1, sstride_);
  }
  L_.barrier(id_);
}

/// KV heads in blocks whose columns are a whole number of DMA-aligned bytes; the owner of a
/// block (blocks dealt round-robin) merges, normalises and stores it.
void AttentionLowering::outputs(const Expr& row0, const Expr& rows) {
  const int64_t c = L_.c, P = L_.P;
  const ValueLoc& y = loc(id_);
  int64_t hb = 1;
  while (hb < KV_ && ((hb * g_ * hd_ * 2) % L_.cx.o.target.dma_align != 0 || KV_ % hb != 0)) ++hb;
  for (int64_t h0 = 0; h0 < KV_; h0 += hb) {
    if ((h0 / hb) % P != c) continue;
    for (int64_t h = h0; h < h0 + hb; ++h) {
      int32_t src = sum_[static_cast<size_t>(h)];
      if (P > 1) {
        scratch_dma(false, sparts_, sum_base_ + h * sstride_, rg_ * (hd_ + 1) * 8, P,
                    KV_ * sstride_);
        isa::Merge m;
        m.op = isa::MergeOp::kSum;
        m.parts = ref(sparts_);
        m.out = ref(src);
        m.parts_count = P;
        m.count = rg_ * (hd_ + 1);
        m.part_stride = rg_ * (hd_ + 1);
        L_.s.emit(m, Queue::kCompute, id_, pass_);
      }
      isa::AttnOut o;
      o.acc = ref(src, Expr(rg_ * 8));
      o.esum = ref(src);
      o.params = ref(prm_);
      o.y = ref(yt_, Expr(h * g_ * hd_ * 2));
      o.rows = rows;
      o.kv_head = h;
      o.attn = ai_.desc;
      L_.s.emit(o, Queue::kCompute, id_, pass_);
    }
    isa::Dma st;
    st.src = ref(yt_, Expr(h0 * g_ * hd_ * 2));
    st.dst = ref(y.buf, Expr(y.col + h0 * g_ * hd_ * 2) + row0 * Expr(y.stride));
    st.rows = rows;
    st.row_bytes = hb * g_ * hd_ * 2;
    st.src_stride = H_ * hd_ * 2;
    st.dst_stride = y.stride;
    L_.s.emit(st, Queue::kStore, id_, pass_);
  }
}

void AttentionLowering::attend() {
  alloc_attend();
  load_params(prm_, pass_);
  const int rv = L_.s.begin_loop(seq_.ceildiv(Expr(br_)), id_, pass_);
  const Expr row0 = Expr::loop(rv) * Expr(br_);
  const Expr rows = (seq_ - row0).min(Expr(br_));
  // A bidirectional attention (full_attention) sees keys [0, seq) from every row: qpos0 is
  // the range's last position and does not advance with the row (isa::AttnDesc).
  const Expr qpos0 = d_.bidirectional ? seq_ - Expr(1) : start_ + row0;
  L_.s.emit(L_.load_rows(loc(n_.operands[0].value), qt_, row0, rows), Queue::kLoad, id_, pass_);
  prepare_queries(rows);
  // Chunks the row tile sees: from the window's first position (or 0) to its last query. In a
  // span program every row also sees the call's keys [start, start + seq - 1] (QkScores::span;
  // append() stored them all before this loop).
  const Expr last_q = d_.bidirectional ? qpos0
                      : L_.span        ? start_ + seq_ - Expr(1)
                                       : qpos0 + rows - Expr(1);
  const Expr first_q =
      L_.span ? (qpos0 - Expr(d_.window - 1)).min(start_) : qpos0 - Expr(d_.window - 1);
  const Expr lo = d_.window > 0 ? first_q.max(Expr(0)) : Expr(0);
  chunk_first_ = lo.floordiv(Expr(bc_));
  const Expr count = last_q.floordiv(Expr(bc_)) - chunk_first_ + Expr(1);
  chunk_trip_ = (count - Expr(L_.c)).ceildiv(Expr(L_.P)).max(Expr(0));
  for (int64_t h = 0; h < KV_; ++h) chunk_loop(h, false, isa::MaxMode::kUpdate, rows, qpos0);
  if (L_.P > 1) merge_max();
  for (int64_t h = 0; h < KV_; ++h) chunk_loop(h, true, isa::MaxMode::kNone, rows, qpos0);
  if (L_.P > 1) store_sums();
  outputs(row0, rows);
  L_.s.end_loop();
}

void AttentionLowering::attend_segments(const std::vector<int64_t>& segments) {
  alloc_attend();
  load_params(prm_, pass_);
  const std::vector<int64_t> lengths = segment_lengths(n_);
  int64_t lo = 0;
  for (int64_t len : segments) {
    const int64_t hi = lo + len;
    const auto at = std::lower_bound(lengths.begin(), lengths.end(), len) - lengths.begin();
    qk_attn_ = ai_.desc + 1 + static_cast<int32_t>(at);
    const int rv = L_.s.begin_loop(Expr((len + br_ - 1) / br_), id_, pass_);
    const Expr row0 = Expr(lo) + Expr::loop(rv) * Expr(br_);
    const Expr rows = (Expr(hi) - row0).min(Expr(br_));
    const Expr qpos0 = Expr(hi - 1);  // every row sees [hi - window, hi - 1] = [lo, hi)
    L_.s.emit(L_.load_rows(loc(n_.operands[0].value), qt_, row0, rows), Queue::kLoad, id_, pass_);
    prepare_queries(rows);
    chunk_first_ = Expr(lo / bc_);
    const int64_t count = (hi - 1) / bc_ - lo / bc_ + 1;
    chunk_trip_ = (Expr(count) - Expr(L_.c)).ceildiv(Expr(L_.P)).max(Expr(0));
    for (int64_t h = 0; h < KV_; ++h) chunk_loop(h, false, isa::MaxMode::kUpdate, rows, qpos0);
    if (L_.P > 1) merge_max();
    for (int64_t h = 0; h < KV_; ++h) chunk_loop(h, true, isa::MaxMode::kNone, rows, qpos0);
    if (L_.P > 1) store_sums();
    outputs(row0, rows);
    L_.s.end_loop();
    lo = hi;
  }
  qk_attn_ = -1;
}

}  // namespace

void lower_attention(const Node& n, int id, CoreLowering& L) {
  AttentionLowering a(n, id, L);
  a.append();
  L.barrier(id);
  ++L.stage;
  const std::vector<int64_t> segments = n.op == ir::Op::kFullAttention && n.attrs.has("segments")
                                            ? n.attrs.get_ints("segments")
                                            : std::vector<int64_t>();
  if (segments.empty()) {
    a.attend();
  } else {
    a.attend_segments(segments);
  }
}

}  // namespace qbc::npu
