// The integer codes of a GGUF's Q8_0, Q5_0, Q5_1, Q4_0 and Q4_1 linears as imported weights
// (private to the frontend): "keep what the user gave us". Q8_0, Q5_0 and Q4_0 are a signed
// integer code times one fp16 scale per block of 32 inputs, which qbc's W8 (Q8_0, Q5_0) and W4
// (Q4_0) group-32 formats hold exactly; Q4_1 and Q5_1 add an fp16 minimum per block,
// w = d·u + m with unsigned codes u, held as codes u − 2^(b−1), zero point −2^(b−1) and a float
// offset m (docs/numerics.md "Float offsets"). The other types (the K-quants' sub-block scales
// and minima, the i-quants' grids) are dequantized and re-quantized.
//
// ggml's Q4_0 and Q5_0 quantizers divide by the signed value of largest magnitude, so half
// of their blocks have a negative scale d. Such a block is stored with the positive scale -d,
// the code c = -q - 1 and the zero point -1, which stands for the same values exactly:
//   d * q = (-d) * (-q) = (-d) * ((-q - 1) - (-1)).
// (A Q4_1 / Q5_1 block with a negative d, which ggml never writes, gets c = -q - 1 and the
// zero point 2^(b-1) - 1 the same way.) A block whose scale is 0 (all its weights 0, or all m)
// gets scale 2^-14 and codes standing for 0.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "qbc/frontend/gguf.h"
#include "qbc/frontend/model_source.h"
#include "qbc/frontend/prequant.h"
#include "qbc/support/status.h"

namespace qbc::frontend::gguf_codes {

/// The weight quantization a linear of `type` keeps (int8 or int4, group 32, with zero
/// points; float offsets for Q4_1 and Q5_1), or nullopt when the type's codes cannot be kept.
std::optional<WeightQuantArgs> keepable(GgmlType type);

/// The linears of `tensors` (HF names, GGUF dtypes) whose codes are kept, sorted by module,
/// and the config describing them (method "gguf"); nullopt when there is none.
struct Found {
  PrequantConfig config;
  std::vector<PackedTensorRef> linears;
};
std::optional<Found> find_linears(const std::vector<TensorInfo>& tensors, const GgufFile& gguf);

/// The codes, scales and zero points of linear `info` (its rows un-permuted like its values).
/// Errors name the file and the tensor.
StatusOr<PackedLinear> read_linear(const GgufFile& gguf, const TensorInfo& info,
                                   const PackedTensorRef& ref);

}  // namespace qbc::frontend::gguf_codes
