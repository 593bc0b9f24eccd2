// Instruction streams under construction (see lowering.h).
#include "lowering.h"
#include "qbc/support/check.h"

namespace qbc::npu {

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

}  // namespace qbc::npu
