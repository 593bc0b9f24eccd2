// The 8-bit host embedding of docs/numerics.md "8-bit embedding": int8 codes with one fp32
// scale per row (bit.embedding 8). One implementation for the writer (the backend's
// fill-weights), the fake-quant evaluator and the runtime's row lookup.
#pragma once

#include <cstdint>

namespace qbc::numerics {

/// The quantized graph's metadata key that asks for the 8-bit table: value "8" (absent: the
/// table stays float). Written by `qbc quantize` from bit.embedding; read by the evaluator and
/// by the backend's fill-weights.
inline constexpr const char kEmbeddingBitsKey[] = "qbc.embedding_bits";

/// Quantizes `rows` rows of `hidden` values: scale[r] = per_token_scale(row, hidden, 8)
/// (fp32(max|x| / 127) in fp64, at least kMinScale, so a zero row gets 1e-8 and codes 0) and
/// codes[r·hidden + i] = quantize_symmetric(x, scale[r], 8), which stays in [−127, 127].
/// Returns −1, or the first row holding a value that is not finite (nothing is written past
/// it; the caller names the tensor and refuses it).
int64_t quantize_embedding_rows(const float* table, int64_t rows, int64_t hidden,
                                int8_t* codes, float* scales);

/// A row looked up: out[i] = fp32(codes[i]) · scale, one fp32 multiply each (the values the
/// host then rounds to the fp16 inputs_embeds like any float row).
inline void dequantize_embedding_row(const int8_t* codes, float scale, int64_t hidden,
                                     float* out) {
  for (int64_t i = 0; i < hidden; ++i) out[i] = static_cast<float>(codes[i]) * scale;
}

}  // namespace qbc::numerics
