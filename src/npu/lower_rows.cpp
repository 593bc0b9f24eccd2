// The lowering of row-wise ops (docs/npu.md "Lowering"): RMSNorm, LayerNorm, rope, rope_table,
// avg_pool and the elementwise ops (add, gated activation, gelu, scale, softcap). Row tiles go
// round-robin to the cores; each tile is loaded, computed and stored.
#include <algorithm>
#include <string>
#include <vector>

#include "backend.h"
#include "lowering.h"

namespace qbc::npu {

using ir::Node;
using ir::Op;
using isa::DType;
using isa::Expr;
using isa::Queue;
using isa::Sym;

void lower_rows(const Node& n, int id, CoreLowering& L) {
  const int32_t pass = L.cx.pass_id("lower-vector");
  const NodePlan& np = L.cx.plan.nodes[static_cast<size_t>(id)];
  const ValueLoc& y = np.place;
  std::vector<const ValueLoc*> in;
  for (const ir::Operand& op : n.operands) {  // rope's positions come from the runtime values
    if (!op.is_weight() && op.value != L.cx.plan.positions)
      in.push_back(&L.cx.plan.nodes[static_cast<size_t>(op.value)].place);
  }
  const int64_t W = y.width;
  const int64_t eb = isa::dtype_bytes(y.type, 1);
  const int64_t wn =
      n.op == Op::kRmsNorm && n.attrs.get_int("group") > 0 ? n.attrs.get_int("group") : W;
  const int64_t mt = std::min(np.rows_mt, L.cap);
  // avg_pool reads kernel² input rows per output row (whole bands: plan_avg_pool's tiles).
  const int64_t k = n.op == Op::kAvgPool ? n.attrs.get_int("kernel") : 1, fan = k * k;
  SramStage sram = L.sram(n.name, np.stage);
  std::vector<int32_t> ibuf;
  for (size_t i = 0; i < in.size(); ++i)
    ibuf.push_back(sram.alloc("in" + std::to_string(i), in[i]->type, fan * mt * in[i]->width * eb,
                              {fan * mt, in[i]->width}));
  const int32_t obuf = sram.alloc("out", y.type, mt * W * eb, {mt, W});
  int32_t wbuf = -1;
  if (n.op == Op::kRmsNorm || n.op == Op::kLayerNorm) {
    // layer_norm's parameters are two rows: the weight, then the bias.
    const int64_t params = n.op == Op::kLayerNorm ? 2 * W : wn;
    wbuf = n.op == Op::kLayerNorm ? sram.alloc("weight", DType::kF32, 4 * params, {2, W})
                                  : sram.alloc("weight", DType::kF32, 4 * params, {wn});
    isa::Dma d;
    d.dst = ref(wbuf);
    d.src = ref(np.norm_weight);
    d.row_bytes = 4 * params;
    d.dst_stride = d.src_stride = d.row_bytes;
    L.s.emit(d, Queue::kLoad, id, pass);
  }
  const Expr all = L.rows(id);
  const int var = L.s.begin_loop(round_robin_trip(all, mt, L.c, L.P), id, pass);
  const Expr tile = Expr(L.c) + Expr(L.P) * Expr::loop(var);
  const Expr row0 = tile * Expr(mt);
  const Expr rows = (all - row0).min(Expr(mt));
  for (size_t i = 0; i < in.size(); ++i) {
    L.s.emit(L.load_rows(*in[i], ibuf[i], row0 * Expr(fan), rows * Expr(fan)), Queue::kLoad, id,
             pass);
  }
  switch (n.op) {
    case Op::kRmsNorm: {
      isa::RmsNorm r;
      r.x = ref(ibuf[0]);
      r.weight = ref(wbuf);
      r.y = ref(obuf);
      r.rows = rows;
      r.width = W;
      r.group = n.attrs.get_int("group");
      r.eps = n.attrs.get_float("eps");
      r.unit_offset = static_cast<double>(n.attrs.get_int("unit_offset"));
      L.s.emit(r, Queue::kCompute, id, pass);
      break;
    }
    case Op::kLayerNorm: {
      isa::LayerNorm r;
      r.x = ref(ibuf[0]);
      r.weight = ref(wbuf);
      r.y = ref(obuf);
      r.rows = rows;
      r.width = W;
      r.eps = n.attrs.get_float("eps");
      L.s.emit(r, Queue::kCompute, id, pass);
      break;
    }
    case Op::kRope: {
      isa::Rope r;
      r.x = ref(ibuf[0]);
      r.y = ref(obuf);
      r.rows = rows;
      r.pos0 = Expr::sym(Sym::kStart) + row0;
      r.freq_pos = Expr::sym(Sym::kStart) + Expr::sym(Sym::kSeq) - Expr(1);
      r.rope = np.rope;
      L.s.emit(r, Queue::kCompute, id, pass);
      break;
    }
    case Op::kRopeTable: {  // the host's cos and sin rows of this tile's tokens
      isa::RopeTable r;
      r.x = ref(ibuf[0]);
      r.cos = ref(ibuf[1]);
      r.sin = ref(ibuf[2]);
      r.y = ref(obuf);
      r.rows = rows;
      r.heads = n.attrs.get_int("num_heads");
      r.head_dim = n.attrs.get_int("head_dim");
      L.s.emit(r, Queue::kCompute, id, pass);
      break;
    }
    case Op::kAvgPool: {
      isa::AvgPool r;
      r.x = ref(ibuf[0]);
      r.y = ref(obuf);
      r.rows = rows;
      r.width = W;
      r.grid_w = n.attrs.get_int("grid_w");
      r.kernel = static_cast<int32_t>(k);
      L.s.emit(r, Queue::kCompute, id, pass);
      break;
    }
    default: {
      isa::Eltwise e;
      e.a = ref(ibuf[0]);
      if (ibuf.size() > 1) e.b = ref(ibuf[1]);
      e.y = ref(obuf);
      e.rows = rows;
      e.width = W;
      e.type = y.type;
      if (n.op == Op::kAdd) {
        e.op = isa::EltOp::kAdd;
      } else if (n.op == Op::kGatedAct) {
        e.op = n.attrs.get_string("act") == "gelu_tanh" ? isa::EltOp::kGelu : isa::EltOp::kSilu;
      } else if (n.op == Op::kGelu) {  // unary: erf, CLIP's quick_gelu or SigLIP's tanh GELU
        const std::string approx = n.attrs.has("approx") ? n.attrs.get_string("approx") : "";
        e.op = approx.empty()     ? isa::EltOp::kGeluErf
               : approx == "tanh" ? isa::EltOp::kGeluTanh
                                  : isa::EltOp::kGeluQuick;
      } else if (n.op == Op::kScale) {
        e.op = isa::EltOp::kScale;
        e.factor = static_cast<float>(n.attrs.get_float("factor"));
      } else {
        e.op = isa::EltOp::kSoftcap;
        e.factor = static_cast<float>(n.attrs.get_float("cap"));
      }
      L.s.emit(e, Queue::kCompute, id, pass);
      break;
    }
  }
  L.s.emit(L.store_rows(y, obuf, row0, rows), Queue::kStore, id, pass);
  L.s.end_loop();
}

}  // namespace qbc::npu
