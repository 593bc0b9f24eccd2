// Exponent codes without exp (see exp_codes.h).
#include "exp_codes.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>

#include "qbc/numerics/attention.h"
#include "qbc/support/bit_cast.h"
#include "qbc/support/check.h"

namespace qbc::runtime {
namespace {

float from_bits(uint32_t p) { return bit_cast<float>(p); }

/// The negative floats' top 16 bits: 0x8000 (-0 .. the least subnormals) to 0xFF80 (-inf).
constexpr uint32_t kFirstBucket = 0x8000u, kInfBits = 0xFF800000u;

}  // namespace

ExpCodes::ExpCodes(int bits) : bits_(bits), hi_((1 << bits) - 1) {
  for (float& t : thr_) t = std::numeric_limits<float>::infinity();
  for (int k = 1; k <= hi_; ++k) {
    // p in [0x80000000, 0xFF7FFFFF]: -0 down to -FLT_MAX; exp_code(lo) >= k > exp_code(up).
    uint32_t lo = 0x80000000u, up = 0xFF7FFFFFu;
    while (up - lo > 1) {
      const uint32_t mid = lo + (up - lo) / 2;
      if (numerics::exp_code(from_bits(mid), 0.0f, bits) >= k) {
        lo = mid;
      } else {
        up = mid;
      }
    }
    thr_[k - 1] = from_bits(lo);
  }
  // Bucket b holds the negative floats with top bits b; its most negative one is
  // (b << 16) | 0xFFFF (or -inf, past which the patterns are NaNs).
  floor_.resize(0x10000u - kFirstBucket);
  for (uint32_t b = kFirstBucket; b <= 0xFFFFu; ++b) {
    const uint32_t bottom = std::min((b << 16) | 0xFFFFu, kInfBits);
    const uint32_t top = std::min(b << 16, kInfBits);
    const int32_t lo = count(from_bits(bottom));
    floor_[b - kFirstBucket] = static_cast<uint8_t>(lo);
    steps_ = std::max(steps_, count(from_bits(top)) - lo);
  }
}

int32_t ExpCodes::count(float d) const {
  return static_cast<int32_t>(std::upper_bound(thr_, thr_ + hi_, d) - thr_);
}

int32_t ExpCodes::negative(float d) const {
  // At most steps_ thresholds lie in a bucket; thr_[hi_] and beyond are +inf, so the steps
  // past the last threshold add nothing (no data-dependent branch).
  int32_t c = floor_[(bit_cast<uint32_t>(d) >> 16) - kFirstBucket];
  for (int32_t s = 0; s < steps_; ++s) c += thr_[c] <= d ? 1 : 0;
  return c;
}

int32_t ExpCodes::code(float score, float max) const {
  if (std::isinf(score) && score < 0.0f) return 0;
  const float d = score - max;
  if (d < 0.0f) return negative(d);
  if (std::isnan(d)) return numerics::exp_code(score, max, bits_);
  // Zero or positive: the count from the top (almost always already right).
  int32_t c = hi_;
  while (c > 0 && thr_[c - 1] > d) --c;
  return c;
}

int32_t ExpCodes::operator()(float score, float max) const { return code(score, max); }

void ExpCodes::row(const float* scores, int64_t n, float max, int32_t* out) const {
  for (int64_t j = 0; j < n; ++j) {
    // code's negative path inline (a score of -inf gives d = -inf, whose bucket counts 0);
    // zero, positive and NaN differences take code's other paths.
    const float d = scores[j] - max;
    out[j] = d < 0.0f ? negative(d) : code(scores[j], max);
  }
}

const ExpCodes& exp_codes(int bits) {
  QBC_CHECK(bits >= 1 && bits <= 8) << "exp_codes: " << bits << " bits (1 to 8)";
  static std::array<std::unique_ptr<ExpCodes>, 8> tables;
  static std::array<std::once_flag, 8> once;
  const size_t i = static_cast<size_t>(bits - 1);
  std::call_once(once[i], [&] { tables[i] = std::make_unique<ExpCodes>(bits); });
  return *tables[i];
}

}  // namespace qbc::runtime
