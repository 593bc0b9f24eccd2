// Element and tensor types of MBLT values and weights.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qbc::ir {

/// Element types. Quantized integer types appear after quantization.
enum class DType { kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kI4, kU8 };

/// "f32", "bf16", "i8", ...
std::string_view dtype_name(DType d);
/// Inverse of dtype_name.
std::optional<DType> dtype_from_name(std::string_view name);

/// A dimension whose size is known only at run time (batch, sequence).
inline constexpr int64_t kDynamic = -1;

/// Element type plus shape; dims may be kDynamic.
struct TensorType {
  DType dtype = DType::kF32;
  std::vector<int64_t> dims;

  int rank() const { return static_cast<int>(dims.size()); }
  /// Dimension `i`; negative `i` counts from the end.
  int64_t dim(int i) const { return dims[static_cast<size_t>(i < 0 ? rank() + i : i)]; }
  /// Number of elements, or -1 when a dim is dynamic.
  int64_t num_elements() const;
  /// "f32[?,?,64]".
  std::string to_string() const;
  bool operator==(const TensorType& o) const { return dtype == o.dtype && dims == o.dims; }
  bool operator!=(const TensorType& o) const { return !(*this == o); }
};

}  // namespace qbc::ir
