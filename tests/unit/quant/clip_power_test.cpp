// The error powers of GPTQ's MSE clip search (src/quant/clip_power.h): the power is within
// 1e-12 of std::pow over the range weights errors take (and exactly 0 or inf at the ends);
// every kernel the host runs gives, for eight candidates at once, the sums a plain loop over
// power() gives, bit for bit, and stops early only above the bound.
#include "clip_power.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace qbc::quant::clip_detail {
namespace {

TEST(ClipPower, IsWithin1e12OfStdPow) {
  double worst = 0;
  for (const double p : {0.5, 1.0, 2.4, 3.0, 4.0}) {
    for (double l = -80.0; l <= 20.0; l += 0.0137) {
      const double d = std::pow(10.0, l);
      const double want = std::pow(d, p), got = power(d, p);
      if (want < DBL_MIN) {  // below 2^-1022: +0 or tiny by design
        EXPECT_TRUE(got >= 0.0 && got < 1.5 * DBL_MIN) << d << "^" << p << " = " << got;
        continue;
      }
      ASSERT_TRUE(std::isfinite(got)) << d << "^" << p;
      const double rel = std::fabs(got - want) / want;
      EXPECT_LT(rel, 1e-12) << d << "^" << p;
      worst = std::max(worst, rel);
    }
    // Exact powers of two, and the ends of a mantissa.
    for (int e = -60; e <= 60; ++e) {
      for (const double m : {1.0, 1.4142135623730950, 1.4142135623730951, 1.9999999999999998}) {
        const double d = std::ldexp(m, e);
        worst = std::max(worst, std::fabs(power(d, p) - std::pow(d, p)) / std::pow(d, p));
      }
    }
  }
  EXPECT_LT(worst, 1e-12);
  EXPECT_EQ(power(0.0, 2.4), 0.0);
  EXPECT_EQ(power(std::ldexp(1.0, -1070), 2.4), 0.0);  // subnormal
  EXPECT_EQ(power(1e-200, 2.4), 0.0);                  // below 2^-1022
  EXPECT_EQ(power(1e200, 2.4), HUGE_VAL);
  EXPECT_EQ(power(1.0, 2.4), 1.0);
}

/// Σ in order from +0 through power(): the contract's full sum.
double plain(const std::vector<double>& w, double s, int qm, double z, double p) {
  double sum = 0;
  for (double wj : w) {
    const double code = std::clamp(std::nearbyint(wj / s) + z, static_cast<double>(-qm - 1),
                                   static_cast<double>(qm));
    sum += power(std::fabs(s * (code - z) - wj), p);
  }
  return sum;
}

TEST(ClipPower, KernelsGiveThePlainSumsBits) {
  std::mt19937 rng(5);
  std::normal_distribution<double> nd(0.0, 0.02);
  int compared = 0, stopped = 0;
  for (const int64_t len : {1, 3, 4, 5, 8, 31, 32, 33, 100}) {
    std::vector<double> w(static_cast<size_t>(len));
    for (double& v : w) v = nd(rng);
    w[0] = 0.0;  // an exact zero error
    for (const int qm : {7, 127}) {
      for (const int count : {1, 3, 8}) {
        std::vector<double> s(8), z(8);
        for (int c = 0; c < 8; ++c) {
          s[c] = (0.06 - 0.004 * c) / qm;
          z[c] = static_cast<double>(c % 3) - 1.0;
        }
        std::vector<double> full(static_cast<size_t>(count));
        for (int c = 0; c < count; ++c) full[c] = plain(w, s[c], qm, z[c], 2.4);
        const double mid = *std::min_element(full.begin(), full.end()) * 1.0001;
        for (const double bound : {HUGE_VAL, mid, 0.0}) {
          for (const Kernel k :
               {Kernel::kPortable, Kernel::kAvx2, Kernel::kAvx512, Kernel::kAuto}) {
            if (!available(k)) continue;
            std::vector<double> got(8, -1.0);
            power_errors(w.data(), len, s.data(), z.data(), count, qm, 2.4, bound, got.data(), k);
            for (int c = 0; c < count; ++c) {
              if (full[c] < bound) {  // must be the whole sum, bit for bit
                EXPECT_EQ(std::memcmp(&got[c], &full[c], sizeof(double)), 0)
                    << "kernel " << static_cast<int>(k) << " len " << len << " qm " << qm
                    << " candidate " << c << " bound " << bound << ": " << got[c] << " vs "
                    << full[c];
              } else {  // may stop early, never below the bound nor above the whole sum
                EXPECT_GE(got[c], bound);
                EXPECT_LE(got[c], full[c]);
                stopped += got[c] < full[c] ? 1 : 0;
              }
              ++compared;
            }
            for (int c = count; c < 8; ++c) EXPECT_EQ(got[c], -1.0);  // untouched
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 0);
  EXPECT_GT(stopped, 0);  // the early stop was exercised
  EXPECT_TRUE(available(Kernel::kPortable));
}

}  // namespace
}  // namespace qbc::quant::clip_detail
