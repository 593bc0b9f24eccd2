// Element type table and float conversions (see qbc/tensorfile/dtype.h).
#include "qbc/tensorfile/dtype.h"

#include <cstring>

namespace qbc::tensorfile {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::kF32, "F32", 4},   {DType::kF16, "F16", 2},        {DType::kBF16, "BF16", 2},
    {DType::kF64, "F64", 8},   {DType::kI8, "I8", 1},          {DType::kU8, "U8", 1},
    {DType::kI16, "I16", 2},   {DType::kU16, "U16", 2},        {DType::kI32, "I32", 4},
    {DType::kU32, "U32", 4},   {DType::kI64, "I64", 8},        {DType::kU64, "U64", 8},
    {DType::kBool, "BOOL", 1}, {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1},
};
static_assert(sizeof(kDTypes) / sizeof(kDTypes[0]) == static_cast<size_t>(DType::kF8E5M2) + 1,
              "update kDTypes when adding a DType");

const DTypeInfo& info(DType dtype) { return kDTypes[static_cast<size_t>(dtype)]; }

uint32_t f32_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float f32_from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

template <typename T>
T load(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

}  // namespace

std::string_view dtype_name(DType dtype) { return info(dtype).name; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const DTypeInfo& d : kDTypes) {
    if (d.name == name) return d.dtype;
  }
  return std::nullopt;
}

size_t dtype_size(DType dtype) { return info(dtype).size; }

bool dtype_converts_to_f32(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF64:
    case DType::kI8:
    case DType::kU8:
      return true;
    default:
      return false;
  }
}

float fp16_to_f32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) return f32_from_bits(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0) return f32_from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0) return f32_from_bits(sign);
  // Subnormal: value = mantissa * 2^-24, exactly representable in float32.
  const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-08f;
  return sign ? -magnitude : magnitude;
}

float bf16_to_f32(uint16_t bits) { return f32_from_bits(static_cast<uint32_t>(bits) << 16); }

uint16_t f32_to_fp16(float value) {
  const uint32_t bits = f32_bits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | 0x7E00u;   // NaN (quiet)
  if (abs >= 0x477FF000u) return sign | 0x7C00u;  // rounds to >= 65520: infinity
  if (abs < 0x38800000u) {                        // below 2^-14: fp16 subnormal or zero
    if (abs < 0x33000000u) return sign;           // below 2^-25: rounds to zero
    const uint32_t mantissa = (abs & 0x7FFFFFu) | 0x800000u;
    const int shift = 126 - static_cast<int>(abs >> 23);  // 14..24
    uint32_t result = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (result & 1u))) ++result;
    return sign | static_cast<uint16_t>(result);
  }
  uint32_t result = ((abs >> 13) - (112u << 10));
  const uint32_t rest = abs & 0x1FFFu;
  if (rest > 0x1000u || (rest == 0x1000u && (result & 1u))) ++result;
  return sign | static_cast<uint16_t>(result);
}

uint16_t f32_to_bf16(float value) {
  const uint32_t bits = f32_bits(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

Status convert_to_f32(DType dtype, const uint8_t* src, size_t count, float* dst) {
  switch (dtype) {
    case DType::kF32:
      if (count > 0) std::memcpy(dst, src, count * sizeof(float));
      return ok_status();
    case DType::kF16:
      for (size_t i = 0; i < count; ++i) dst[i] = fp16_to_f32(load<uint16_t>(src + 2 * i));
      return ok_status();
    case DType::kBF16:
      for (size_t i = 0; i < count; ++i) dst[i] = bf16_to_f32(load<uint16_t>(src + 2 * i));
      return ok_status();
    case DType::kF64:
      for (size_t i = 0; i < count; ++i) dst[i] = static_cast<float>(load<double>(src + 8 * i));
      return ok_status();
    case DType::kI8:
      for (size_t i = 0; i < count; ++i) dst[i] = static_cast<float>(load<int8_t>(src + i));
      return ok_status();
    case DType::kU8:
      for (size_t i = 0; i < count; ++i) dst[i] = static_cast<float>(src[i]);
      return ok_status();
    default:
      return unimplemented("conversion of ", dtype_name(dtype), " to F32 is not supported");
  }
}

}  // namespace qbc::tensorfile
