// The exponent codes of attention (numerics::exp_code) for bits <= 8 without exp: a code is
// the number of thresholds at or below d = score - max, the thresholds taken from exp_code
// itself, and a table over the top 16 bits of d starts the count near its end.
#pragma once

#include <cstdint>
#include <vector>

namespace qbc::runtime {

/// numerics::exp_code(score, max, bits) for one bit width, bit for bit. The code of a finite
/// difference d is the number of thresholds t_k <= d, t_k the least float with
/// exp_code(t_k, 0) >= k (k = 1 .. 2^bits - 1): exp_code is non-decreasing in d over floats
/// (exp is accurate to well under the ratio of neighbouring floats, and x hi, nearbyint and
/// the clamp keep the order), so the count is its value for every float. For d < 0 the
/// count starts from its value at the most negative float sharing d's top 16 bits (a
/// threshold or two lie between: the bucket is 1/128 of |d| wide); zero and positive d count
/// down from the top, NaN goes to exp_code itself.
class ExpCodes {
 public:
  explicit ExpCodes(int bits);
  int32_t operator()(float score, float max) const;
  /// out[j] = the code of (scores[j], max) for j < n: one call for a row of scores.
  void row(const float* scores, int64_t n, float max, int32_t* out) const;
  int bits() const { return bits_; }

 private:
  /// The number of thresholds at or below d.
  int32_t count(float d) const;
  int32_t code(float score, float max) const;
  /// The code of a difference d < 0: its bucket's count, then the steps.
  int32_t negative(float d) const;

  int bits_;
  int32_t hi_;
  float thr_[257];              ///< thresholds, then +inf from index hi_
  int32_t steps_ = 0;           ///< the most thresholds in one bucket
  std::vector<uint8_t> floor_;  ///< by (bits of a negative d) >> 16, less 0x8000
};

/// The ExpCodes of `bits` (1 .. 8), built on first use.
const ExpCodes& exp_codes(int bits);

}  // namespace qbc::runtime
