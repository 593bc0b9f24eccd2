// Per-block decoders of the ggml quantized types (private to the frontend). Each decoder reads
// exactly one block of its type (GgmlTypeTraits::type_size bytes, checked by the caller) and
// writes its block_size floats. The arithmetic is ggml's dequantize_row_* (ggml-quants.c)
// operation for operation, so every value is bit-identical in fp32; the files are compiled
// without floating-point contraction so no a*b-c becomes an FMA.
#pragma once

#include <cstdint>
#include <cstring>

#include "qbc/frontend/gguf.h"
#include "qbc/tensorfile/dtype.h"

namespace qbc::frontend::gguf_blocks {

/// Decodes one block at `block` into `y`.
using BlockDecoder = void (*)(const uint8_t* block, float* y);

/// The decoder of a K-quant or ternary type (Q2_K..Q8_K, TQ1_0, TQ2_0), or nullptr.
BlockDecoder k_quant_decoder(GgmlType type);
/// The decoder of an i-quant, IQ4_NL/IQ4_XS or MXFP4, or nullptr.
BlockDecoder iq_decoder(GgmlType type);

/// The IEEE half at `p` (little-endian) as float (exact, subnormals included).
inline float load_fp16(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof(bits));
  return tensorfile::fp16_to_f32(bits);
}

/// The little-endian u16 / u32 at `p`.
inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

}  // namespace qbc::frontend::gguf_blocks
