// Instruction streams under construction and the emit helpers the op lowerings share (see
// lowering.h).
#include <algorithm>

#include "backend.h"
#include "lowering.h"
#include "qbc/support/check.h"

namespace qbc::npu {

using isa::Expr;
using isa::Sym;

void Stream::emit(isa::Op op, isa::Queue q, int32_t node, int32_t pass) {
  isa::Instr in;
  in.op = std::move(op);
  in.queue = q;
  in.node = node;
  in.pass = pass;
  code_->push_back(std::move(in));
}

int Stream::begin_loop(const isa::Expr& trip, int32_t node, int32_t pass) {
  isa::Loop l;
  l.var = depth();
  l.trip = trip;
  open_.push_back(code_->size());
  emit(l, isa::Queue::kCompute, node, pass);
  return l.var;
}

void Stream::end_loop() {
  QBC_CHECK(!open_.empty()) << "end_loop without a loop";
  const size_t at = open_.back();
  open_.pop_back();
  std::get<isa::Loop>((*code_)[at].op).body = static_cast<int32_t>(code_->size() - at - 1);
}

int32_t SramStage::alloc(const std::string& name, isa::DType t, int64_t bytes,
                         std::vector<int64_t> shape) {
  isa::Buffer buf;
  buf.name = prefix_ + "." + name + "@c" + std::to_string(core_);
  buf.space = isa::Space::kSram;
  buf.core = core_;
  buf.purpose = isa::Purpose::kSram;
  buf.dtype = t;
  buf.offset = top_;
  buf.bytes = std::max<int64_t>(bytes, 1);
  buf.shape = std::move(shape);
  *used_ = std::max(*used_, buf.offset + buf.bytes);
  top_ = align_up(top_ + buf.bytes, align_);
  b_->buffers.push_back(std::move(buf));
  return static_cast<int32_t>(b_->buffers.size() - 1);
}

SramStage CoreLowering::sram(const std::string& name, int32_t plan_stage) const {
  return SramStage(&cx.b, c, cx.o.target.dma_align,
                   prefix + "s" + std::to_string(stage) + "." + name,
                   &cx.plan.stages[static_cast<size_t>(plan_stage)].used);
}

void CoreLowering::barrier(int node) {
  if (P <= 1) return;
  s.emit(isa::Barrier{bar++, P}, isa::Queue::kCompute, node, cx.pass_id("lower-barriers"));
}

isa::Dma CoreLowering::load_rows(const ValueLoc& v, int32_t dst, const Expr& row0,
                                 const Expr& rows) const {
  isa::Dma d;
  d.dst = ref(dst);
  d.src = ref(v.buf, Expr(v.col) + row0 * Expr(v.stride));
  d.rows = rows;
  d.row_bytes = isa::dtype_bytes(v.type, v.width);
  d.dst_stride = d.row_bytes;
  d.src_stride = v.stride;
  return d;
}

isa::Dma CoreLowering::store_rows(const ValueLoc& v, int32_t src, const Expr& row0,
                                  const Expr& rows) const {
  isa::Dma d;
  d.src = ref(src);
  d.dst = ref(v.buf, Expr(v.col) + row0 * Expr(v.stride));
  d.rows = rows;
  d.row_bytes = isa::dtype_bytes(v.type, v.width);
  d.src_stride = d.row_bytes;
  d.dst_stride = v.stride;
  return d;
}

Expr round_robin_trip(const Expr& rows, int64_t mt, int c, int P) {
  return (rows.ceildiv(Expr(mt)) - Expr(c)).ceildiv(Expr(P)).max(Expr(0));
}

Expr CoreLowering::rows(int id) const {
  const int64_t div = cx.plan.nodes[static_cast<size_t>(id)].row_div;
  // The same expression as before row counts existed when nothing merges rows, so decoder
  // programs keep their bytes.
  return div == 1 ? Expr::sym(Sym::kSeq) : Expr::sym(Sym::kSeq).ceildiv(Expr(div));
}

}  // namespace qbc::npu
