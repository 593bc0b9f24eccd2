// Saturating size arithmetic: the byte extents of instructions whose sizes come from a file
// (an MXQ program) or a plan. A product or extent that would overflow is INT64_MAX, so an
// absurd size fails its bounds check instead of wrapping around. Shared by the executor's
// operand checks and counters and by the cost model, which must count the same numbers.
#pragma once

#include <climits>
#include <cstdint>

namespace qbc {

/// a * b for a, b >= 0, saturating at INT64_MAX.
inline int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

/// The product of non-negative sizes, saturating.
inline int64_t span(int64_t a) { return a; }
template <typename... T>
int64_t span(int64_t a, int64_t b, T... rest) {
  return span(sat_mul(a, b), rest...);
}

/// Bytes covered by `rows` rows of `row` bytes `stride` bytes apart: (rows − 1) * stride + row,
/// 0 without rows; saturating.
inline int64_t rows_span(int64_t rows, int64_t stride, int64_t row) {
  if (rows <= 0) return 0;
  const int64_t a = sat_mul(rows - 1, stride);
  return a > INT64_MAX - row ? INT64_MAX : a + row;
}

}  // namespace qbc
