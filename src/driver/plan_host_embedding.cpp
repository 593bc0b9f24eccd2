// The host embedding line of `qbc plan` (qbc/driver/plan.h, HostEmbeddingPlan): the table's
// bytes as the MXQ stores them, and what bit.embedding 8 makes of them.
#include <string>

#include "qbc/driver/plan.h"

namespace qbc::driver {

HostEmbeddingPlan host_embedding_plan(int64_t rows, int64_t hidden, const std::string& torch_dtype,
                                      int embedding_bits) {
  HostEmbeddingPlan e;
  e.rows = rows;
  e.hidden = hidden;
  e.float_value_bytes = torch_dtype == "bfloat16" ? 2 : 4;
  e.i8 = embedding_bits == 8;
  return e;
}

}  // namespace qbc::driver
