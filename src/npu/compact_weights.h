// The compact grouped weight image of a qlinear (docs/numerics.md "Compact grouped
// weights"): with attribute w_scale_f16 on a 4- or 8-bit grouped linear, its scale blocks
// hold fp16 values and its zero-point blocks codes of the weights' width (packed 4-bit, low
// nibble first, or one int8 a value; flat index channel · groups + group) instead of fp32
// and int32. The SRAM buffers the matmul and requant read carry that dtype (f16 / i4 / i8),
// which is how the executor knows; they keep the fp32 / int32 size, so the instructions'
// footprints stay what they were, and only the DMA moves fewer bytes.
#pragma once

#include "backend.h"

namespace qbc::npu {

/// Whether `n` (a qlinear planned as `li`) stores the compact image.
inline bool compact_weights(const ir::Node& n, const LinearPlan& li) {
  return (li.w_bits == 4 || li.w_bits == 8) && li.group > 0 &&
         n.attrs.get_int("w_scale_f16", 0) == 1;
}

/// The storage types of the weight scales and zero points (`bits`: the weights' width).
inline isa::DType scale_type(bool compact) { return compact ? isa::DType::kF16 : isa::DType::kF32; }
inline isa::DType zero_type(bool compact, int bits) {
  return !compact ? isa::DType::kI32 : bits == 4 ? isa::DType::kI4 : isa::DType::kI8;
}

/// Bytes of one scale block and one zero-point block as stored ([nt, gt] values, aligned).
inline int64_t scale_block_bytes(const LinearPlan& li, bool compact, int64_t align) {
  return align_up(isa::dtype_bytes(scale_type(compact), li.t.nt * li.gt), align);
}
inline int64_t zero_block_bytes(const LinearPlan& li, bool compact, int64_t align) {
  return align_up(isa::dtype_bytes(zero_type(compact, li.w_bits), li.t.nt * li.gt), align);
}

}  // namespace qbc::npu
