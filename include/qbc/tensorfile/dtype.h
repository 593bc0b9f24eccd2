// Element types of model-file tensors (safetensors names), their sizes, and the
// scalar conversions from 16-bit floats to float32 that the readers share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "qbc/support/status.h"

namespace qbc::tensorfile {

/// Element type of a tensor stored in a model file. Names follow safetensors
/// ("F32", "BF16", ...); see dtype_name() and parse_dtype().
enum class DType {
  kF32,
  kF16,
  kBF16,
  kF64,
  kI8,
  kU8,
  kI16,
  kU16,
  kI32,
  kU32,
  kI64,
  kU64,
  kBool,
  kF8E4M3,
  kF8E5M2,
};

/// Returns the safetensors name of `dtype`, e.g. "BF16".
std::string_view dtype_name(DType dtype);

/// Parses a safetensors dtype name ("F32", "F16", "BF16", "I8", ...). Returns
/// std::nullopt for names qbc does not know.
std::optional<DType> parse_dtype(std::string_view name);

/// Size in bytes of one element of `dtype` (1 for BOOL and the F8 types).
size_t dtype_size(DType dtype);

/// True iff convert_to_f32() can convert `dtype` (F32, F16, BF16, F64, I8, U8).
bool dtype_converts_to_f32(DType dtype);

/// Converts an IEEE-754 binary16 bit pattern to float32 (exact, incl. subnormals,
/// infinities and NaN).
float fp16_to_f32(uint16_t bits);

/// Converts a bfloat16 bit pattern to float32 (exact).
float bf16_to_f32(uint16_t bits);

/// Converts float32 to binary16 with round-to-nearest-even; overflows become
/// infinity and NaN stays NaN.
uint16_t f32_to_fp16(float value);

/// Converts float32 to bfloat16 with round-to-nearest-even; NaN stays NaN.
uint16_t f32_to_bf16(float value);

/// Converts `count` little-endian elements of `dtype` at `src` (any alignment) to
/// float32 at `dst`. Returns kUnimplemented when !dtype_converts_to_f32(dtype).
Status convert_to_f32(DType dtype, const uint8_t* src, size_t count, float* dst);

}  // namespace qbc::tensorfile
