// The executor's exponent codes (src/runtime/exp_codes.h) against numerics::exp_code itself,
// for every bit width 1 to 8: at every table bucket's edges (the most and least negative
// float of each top-16-bit pattern, and their neighbours), at every threshold and its
// neighbouring floats, over a stride through all negative floats, and for the special values
// (zeros, positive differences, infinities, NaN).
#include "exp_codes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "qbc/numerics/attention.h"
#include "qbc/support/bit_cast.h"

namespace qbc::runtime {
namespace {

float from_bits(uint32_t p) { return bit_cast<float>(p); }

/// Checks the code of d = score - max for a few (score, max) pairs giving that d exactly.
void expect_same(const ExpCodes& e, float d, int bits) {
  const float maxes[] = {0.0f, 1.0f, -3.5f};
  for (float mx : maxes) {
    const float score = d + mx;  // the pair's own difference is what both sides see
    ASSERT_EQ(e(score, mx), numerics::exp_code(score, mx, bits))
        << "bits " << bits << " score " << score << " max " << mx;
  }
}

TEST(ExpCodes, BucketEdgesAndThresholdsGiveExpCodesBits) {
  for (int bits = 1; bits <= 8; ++bits) {
    const ExpCodes& e = exp_codes(bits);
    EXPECT_EQ(e.bits(), bits);
    for (uint32_t b = 0x8000u; b < 0xFF80u; ++b) {
      for (uint32_t low : {0x0000u, 0x0001u, 0x7FFFu, 0xFFFEu, 0xFFFFu})
        expect_same(e, from_bits((b << 16) | low), bits);
    }
    // Every threshold (the least float of each code) and the floats beside it.
    for (uint32_t p = 0x80000000u; p < 0xFF800000u; p += 0x3FFu) {
      const float d = from_bits(p);
      const int32_t c = numerics::exp_code(d, 0.0f, bits);
      const int32_t below =
          numerics::exp_code(from_bits(p + 0x3FFu < 0xFF800000u ? p + 0x3FFu : p), 0.0f, bits);
      if (c == below) continue;  // no threshold in (p + 0x3FF .. p]: nothing to search
      for (uint32_t q = p; q <= p + 0x3FFu && q < 0xFF800000u; ++q)
        expect_same(e, from_bits(q), bits);
    }
  }
}

TEST(ExpCodes, SpecialValuesGiveExpCodesBits) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float values[] = {0.0f,
                          -0.0f,
                          1e-30f,
                          0.5f,
                          3.0f,
                          inf,
                          -inf,
                          nan,
                          -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::denorm_min(),
                          -1e-38f};
  for (int bits = 1; bits <= 8; ++bits) {
    const ExpCodes& e = exp_codes(bits);
    for (float score : values) {
      for (float mx : values) {
        const int32_t want = numerics::exp_code(score, mx, bits);
        EXPECT_EQ(e(score, mx), want) << "bits " << bits << " score " << score << " max " << mx;
      }
    }
  }
}

TEST(ExpCodes, RowGivesEachScoresCode) {
  // A row mixing every path: negative differences across the buckets, zero, positive, the
  // infinities and NaN, against several row maxima.
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> scores = {0.0f, -0.0f, 2.0f,
                               -inf, inf,   std::numeric_limits<float>::quiet_NaN()};
  for (uint32_t b = 0x8000u; b < 0xFF80u; b += 37) scores.push_back(from_bits((b << 16) | 0x1234u));
  for (int bits = 1; bits <= 8; ++bits) {
    const ExpCodes& e = exp_codes(bits);
    for (float mx : {0.0f, 1.5f, -7.0f, -inf}) {
      std::vector<int32_t> got(scores.size(), -1);
      e.row(scores.data(), static_cast<int64_t>(scores.size()), mx, got.data());
      for (size_t j = 0; j < scores.size(); ++j)
        ASSERT_EQ(got[j], numerics::exp_code(scores[j], mx, bits))
            << "bits " << bits << " score " << scores[j] << " max " << mx;
    }
  }
}

}  // namespace
}  // namespace qbc::runtime
