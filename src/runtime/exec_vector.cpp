// The vector unit's row ops: rms_norm, rope and the elementwise ops, each one call of its
// qbc_numerics kernel over rows read from SRAM (fp16 bit patterns, or fp32 for the head's
// elementwise values); fill (start values of row maxima and integer sums).
#include <cstring>
#include <vector>

#include "core.h"
#include "qbc/numerics/elementwise.h"
#include "qbc/numerics/norm.h"
#include "qbc/numerics/rope.h"
#include "values.h"

namespace qbc::runtime {

Status exec_rms_norm(const isa::RmsNorm& op, Core& c) {
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const int64_t count = span(rows, op.width);
  QBC_ASSIGN_OR_RETURN(const uint8_t* xp, c.sram_at(op.x, span(2, count), "x"));
  // Weights: [group] for grouped norms (q/k norms: one head's weights for every group), else
  // [width] (numerics rms_norm).
  const int64_t wn = op.group > 0 ? op.group : op.width;
  QBC_ASSIGN_OR_RETURN(const uint8_t* wp, c.sram_read(op.weight, span(4, wn), "weight"));
  QBC_ASSIGN_OR_RETURN(uint8_t * yp, c.sram_at(op.y, span(2, count), "y"));
  std::vector<float> x(static_cast<size_t>(count)), y(static_cast<size_t>(count));
  std::vector<float> w(static_cast<size_t>(wn));
  load_f16(xp, count, x.data());
  load(wp, wn, w.data());
  numerics::rms_norm(x.data(), rows, op.width, w, op.eps, op.unit_offset, op.group, y.data());
  store_f16(y.data(), count, yp);
  c.counters.vector_ops += count;
  return ok_status();
}

Status exec_rope(const isa::Rope& op, Core& c) {
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const numerics::Rope& r = c.decoded.ropes[static_cast<size_t>(op.rope)];
  const int64_t count = span(rows, r.heads, r.head_dim);
  QBC_ASSIGN_OR_RETURN(const uint8_t* xp, c.sram_at(op.x, span(2, count), "x"));
  QBC_ASSIGN_OR_RETURN(uint8_t * yp, c.sram_at(op.y, span(2, count), "y"));
  QBC_ASSIGN_OR_RETURN(const int64_t pos0, c.count(op.pos0, "pos0"));
  QBC_ASSIGN_OR_RETURN(const int64_t freq_pos, c.count(op.freq_pos, "freq_pos"));
  std::vector<float> x(static_cast<size_t>(count)), y(static_cast<size_t>(count));
  load_f16(xp, count, x.data());
  numerics::rope(x.data(), rows, pos0, r, y.data(), freq_pos);
  store_f16(y.data(), count, yp);
  c.counters.vector_ops += count;
  return ok_status();
}

Status exec_eltwise(const isa::Eltwise& op, Core& c) {
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const int64_t count = span(rows, op.width);
  const bool f16 = op.type == isa::DType::kF16;
  const int64_t bytes = span(count, isa::dtype_bits(op.type) / 8);
  const bool binary =
      op.op == isa::EltOp::kAdd || op.op == isa::EltOp::kSilu || op.op == isa::EltOp::kGelu;
  QBC_ASSIGN_OR_RETURN(const uint8_t* ap, c.sram_at(op.a, bytes, "a"));
  const uint8_t* bp = nullptr;
  if (binary) {
    QBC_ASSIGN_OR_RETURN(bp, c.sram_at(op.b, bytes, "b"));
  }
  QBC_ASSIGN_OR_RETURN(uint8_t * yp, c.sram_at(op.y, bytes, "y"));
  std::vector<float> a(static_cast<size_t>(count)), b, y(static_cast<size_t>(count));
  auto read = [&](const uint8_t* p, float* out) {
    if (f16) {
      load_f16(p, count, out);
    } else {
      load(p, count, out);
    }
  };
  read(ap, a.data());
  if (binary) {
    b.resize(static_cast<size_t>(count));
    read(bp, b.data());
  }
  switch (op.op) {
    case isa::EltOp::kAdd:
      numerics::add(a.data(), b.data(), count, f16, y.data());
      break;
    case isa::EltOp::kSilu:
    case isa::EltOp::kGelu:
      numerics::gated_act(a.data(), b.data(), count, op.op == isa::EltOp::kGelu, f16, y.data());
      break;
    case isa::EltOp::kScale:
      numerics::scale(a.data(), count, op.factor, f16, y.data());
      break;
    case isa::EltOp::kSoftcap:
      numerics::softcap(a.data(), count, op.factor, f16, y.data());
      break;
  }
  if (f16) {
    store_f16(y.data(), count, yp);
  } else {
    store(y.data(), count, yp);
  }
  c.counters.vector_ops += count;
  return ok_status();
}

Status exec_fill(const isa::Fill& op, Core& c) {
  QBC_ASSIGN_OR_RETURN(const int64_t n, c.count(op.count, "count"));
  QBC_ASSIGN_OR_RETURN(uint8_t * y, c.sram_at(op.y, span(n, isa::dtype_bits(op.type) / 8), "y"));
  if (op.type == isa::DType::kF32) {
    const float v = static_cast<float>(op.value);
    for (int64_t i = 0; i < n; ++i) std::memcpy(y + 4 * i, &v, 4);
  } else {
    const int64_t v = static_cast<int64_t>(op.value);  // kI64 (validated)
    for (int64_t i = 0; i < n; ++i) std::memcpy(y + 8 * i, &v, 8);
  }
  c.counters.vector_ops += n;
  return ok_status();
}

}  // namespace qbc::runtime
