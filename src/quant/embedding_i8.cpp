// The 8-bit host embedding in the quantized graph (see qbc/quant/embedding_i8.h).
#include "qbc/quant/embedding_i8.h"

#include "qbc/numerics/embedding_rows.h"

namespace qbc::quant {

void record_embedding_bits(const config::CompileOptions& options, ir::Graph& g) {
  if (options.bit().embedding() == 8) {
    g.metadata[numerics::kEmbeddingBitsKey] = "8";
  } else {
    g.metadata.erase(numerics::kEmbeddingBitsKey);
  }
}

bool embedding_is_i8(const ir::Graph& g) {
  return g.metadata.count(numerics::kEmbeddingBitsKey) != 0;
}

Status embedding_as_i8(const ir::Graph& g, int64_t hidden, std::vector<float>* table) {
  const auto it = g.metadata.find(numerics::kEmbeddingBitsKey);
  if (it == g.metadata.end() || table->empty()) return ok_status();
  if (it->second != "8")
    return invalid_argument("graph metadata '", numerics::kEmbeddingBitsKey, "' is '", it->second,
                            "', expected 8");
  if (hidden <= 0 || table->size() % static_cast<size_t>(hidden) != 0)
    return invalid_argument("host embedding of ", table->size(), " values is not rows of ", hidden);
  const int64_t rows = static_cast<int64_t>(table->size()) / hidden;
  std::vector<int8_t> codes(table->size());
  std::vector<float> scales(static_cast<size_t>(rows));
  const int64_t bad =
      numerics::quantize_embedding_rows(table->data(), rows, hidden, codes.data(), scales.data());
  if (bad >= 0) return invalid_argument("host embedding row ", bad, " holds a value that is not finite");
  for (int64_t r = 0; r < rows; ++r) {
    numerics::dequantize_embedding_row(codes.data() + r * hidden, scales[static_cast<size_t>(r)],
                                       hidden, table->data() + r * hidden);
  }
  return ok_status();
}

}  // namespace qbc::quant
