#include "qbc/ir/types.h"

#include <array>

namespace qbc::ir {
namespace {
constexpr std::array<std::pair<DType, std::string_view>, 9> kNames = {{
    {DType::kF32, "f32"}, {DType::kF16, "f16"}, {DType::kBF16, "bf16"},
    {DType::kI64, "i64"}, {DType::kI32, "i32"}, {DType::kI16, "i16"},
    {DType::kI8, "i8"},   {DType::kI4, "i4"},   {DType::kU8, "u8"},
}};
}  // namespace

std::string_view dtype_name(DType d) {
  for (const auto& [dt, name] : kNames) {
    if (dt == d) return name;
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& [dt, n] : kNames) {
    if (n == name) return dt;
  }
  return std::nullopt;
}

int64_t TensorType::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return -1;
    n *= d;
  }
  return n;
}

std::string TensorType::to_string() const {
  std::string s(dtype_name(dtype));
  s += "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    s += dims[i] == kDynamic ? std::string("?") : std::to_string(dims[i]);
  }
  return s + "]";
}

}  // namespace qbc::ir
