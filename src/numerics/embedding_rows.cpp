// The 8-bit host embedding (see qbc/numerics/embedding_rows.h).
#include "qbc/numerics/embedding_rows.h"

#include <cmath>

#include "qbc/numerics/quantizer.h"

namespace qbc::numerics {

int64_t quantize_embedding_rows(const float* table, int64_t rows, int64_t hidden,
                                int8_t* codes, float* scales) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = table + r * hidden;
    for (int64_t i = 0; i < hidden; ++i) {
      if (!std::isfinite(x[i])) return r;
    }
    const float s = per_token_scale(x, hidden, 8);
    scales[r] = s;
    for (int64_t i = 0; i < hidden; ++i)
      codes[r * hidden + i] = static_cast<int8_t>(quantize_symmetric(x[i], s, 8));
  }
  return -1;
}

}  // namespace qbc::numerics
