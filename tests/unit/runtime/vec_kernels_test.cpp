// The executor's vector loops (src/runtime/vec_kernels.h) against plain loops written here from
// their contracts: whatever path this host takes (AVX2 or portable), every output has the bits
// of the element-at-a-time fp32 expression in its stated order, for channel counts around the
// 8-lane width, group counts from 1 up, with and without a running sum, and for values that
// expose reassociation (large and small magnitudes mixed, signed zeros, infinities, NaN).
#include "vec_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "qbc/numerics/fp16.h"
#include "qbc/support/bit_cast.h"

namespace qbc::runtime {
namespace {

uint32_t bits(float f) { return bit_cast<uint32_t>(f); }

/// Values whose sums depend on the order they are added in.
std::vector<float> hostile(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const float scale = (i % 3 == 0) ? 1e7f : (i % 3 == 1 ? 1.0f : 1e-7f);
    v[i] = u(rng) * scale;
  }
  return v;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "at " << i;
    } else {
      EXPECT_EQ(bits(got[i]), bits(want[i])) << "at " << i << ": " << got[i] << " vs " << want[i];
    }
  }
}

TEST(VecKernels, SumGroupsAddsEachChannelsGroupsInOrder) {
  for (int64_t n : {0, 1, 7, 8, 9, 16, 23, 96}) {
    for (int64_t gt : {1, 2, 3, 8, 18, 33}) {
      for (bool with_fsum : {false, true}) {
        SCOPED_TRACE("n " + std::to_string(n) + " gt " + std::to_string(gt) +
                     (with_fsum ? " fsum" : ""));
        const std::vector<float> part =
            hostile(static_cast<size_t>(n * gt), static_cast<uint32_t>(n * 100 + gt));
        const std::vector<float> fsum = hostile(static_cast<size_t>(n), 7);
        std::vector<float> want(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) {
          float s = with_fsum ? fsum[j] + part[j * gt] : part[j * gt];
          for (int64_t g = 1; g < gt; ++g) s = s + part[j * gt + g];
          want[j] = s;
        }
        std::vector<float> got(static_cast<size_t>(n), -1.0f);
        sum_groups(part.data(), n, gt, with_fsum ? fsum.data() : nullptr, got.data());
        expect_same_bits(got, want);
      }
    }
  }
}

TEST(VecKernels, SumGroupsKeepsSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Nine channels of two groups: the eighth lane and the portable tail both see each case.
  const std::vector<float> part = {-0.0f, -0.0f, inf,   -inf,   nan,    1.0f, 1e38f, 1e38f, 0.0f,
                                   -0.0f, 1.0f,  -1.0f, 3e-45f, 3e-45f, -inf, 2.0f,  5.0f,  nan};
  const std::vector<float> fsum = {-0.0f, 1.0f, 0.0f, -1e38f, 0.0f, 0.0f, 0.0f, 0.0f, -0.0f};
  for (bool with_fsum : {false, true}) {
    std::vector<float> want(9);
    for (int j = 0; j < 9; ++j) {
      const float p0 = part[static_cast<size_t>(2 * j)];
      want[static_cast<size_t>(j)] = (with_fsum ? fsum[static_cast<size_t>(j)] + p0 : p0) +
                                     part[static_cast<size_t>(2 * j + 1)];
    }
    std::vector<float> got(9);
    sum_groups(part.data(), 9, 2, with_fsum ? fsum.data() : nullptr, got.data());
    expect_same_bits(got, want);
  }
}

/// v[j] = ((fsum[j] +) part(j, 0)) + part(j, 1) + ... for j < n: a grouped requant's fp32 sums
/// in group order, one element at a time (numerics::qlinear).
template <typename Part>
std::vector<float> group_order_sums(int64_t n, int64_t gt, const std::vector<float>* fsum,
                                    const Part& part) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    float s = 0.0f;
    for (int64_t g = 0; g < gt; ++g) {
      const float p = part(j, g);
      s = g == 0 ? (fsum != nullptr ? (*fsum)[static_cast<size_t>(j)] + p : p) : s + p;
    }
    v[static_cast<size_t>(j)] = s;
  }
  return v;
}

TEST(VecKernels, GroupedRequantIsTheScalarExpressionInGroupOrder) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> acc_dist(-(1 << 30), 1 << 30);
  for (int64_t n : {0, 1, 7, 8, 9, 16, 23, 96}) {
    for (int64_t gt : {1, 2, 8, 9, 18, 33}) {
      for (int64_t pad : {0, 3}) {
        for (int variant = 0; variant < 4; ++variant) {
          const bool with_fsum = variant & 1, with_wm = variant & 2;
          SCOPED_TRACE("n " + std::to_string(n) + " gt " + std::to_string(gt) + " pad " +
                       std::to_string(pad) + (with_fsum ? " fsum" : "") + (with_wm ? " wm" : ""));
          const int64_t stride = gt + pad;
          std::vector<int32_t> acc(static_cast<size_t>(n * gt));
          for (int32_t& a : acc) a = acc_dist(rng);
          const std::vector<float> ws = hostile(static_cast<size_t>(n * stride), 21);
          const std::vector<float> wm = hostile(static_cast<size_t>(n * stride), 22);
          const std::vector<float> xsf = hostile(static_cast<size_t>(gt), 23);
          const std::vector<float> fsum = hostile(static_cast<size_t>(n), 24);
          const float xm = 0.0123f;
          const std::vector<float> want =
              group_order_sums(n, gt, with_fsum ? &fsum : nullptr, [&](int64_t j, int64_t g) {
                float p = static_cast<float>(acc[j * gt + g]) * (xm * ws[j * stride + g]);
                if (with_wm) p = p + xsf[g] * (xm * wm[j * stride + g]);
                return p;
              });
          std::vector<float> got(static_cast<size_t>(n), -1.0f);
          grouped_requant(acc.data(), n, gt, xm, ws.data(), stride, with_wm ? xsf.data() : nullptr,
                          with_wm ? wm.data() : nullptr, with_fsum ? fsum.data() : nullptr,
                          got.data());
          expect_same_bits(got, want);
        }
      }
    }
  }
}

TEST(VecKernels, GroupedRequantReadsBinary16ScalesInPlace) {
  // The scales as SRAM holds the compact image's: binary16 bits at an odd address, the buffer
  // ending right after the last row's last scale (the last row's short block must not read
  // past it). Every bit pattern class: normals, subnormals, signed zeros, infinities, NaN.
  std::mt19937 rng(13);
  std::uniform_int_distribution<int32_t> acc_dist(-(1 << 30), 1 << 30);
  for (int64_t n : {1, 7, 8, 9, 23, 96}) {
    for (int64_t gt : {1, 2, 8, 9, 18, 33}) {
      for (int64_t pad : {0, 3}) {
        for (bool with_fsum : {false, true}) {
          SCOPED_TRACE("n " + std::to_string(n) + " gt " + std::to_string(gt) + " pad " +
                       std::to_string(pad) + (with_fsum ? " fsum" : ""));
          const int64_t stride = gt + pad, count = (n - 1) * stride + gt;
          std::vector<int32_t> acc(static_cast<size_t>(n * gt));
          for (int32_t& a : acc) a = acc_dist(rng);
          std::vector<uint16_t> bits(static_cast<size_t>(count));
          for (uint16_t& b : bits) b = static_cast<uint16_t>(rng());
          bits[0] = 0x0001;  // the smallest subnormal
          bits[static_cast<size_t>(count - 1)] = 0x8000;
          std::vector<uint8_t> ws(static_cast<size_t>(1 + 2 * count));
          std::memcpy(ws.data() + 1, bits.data(), 2 * static_cast<size_t>(count));
          const std::vector<float> fsum = hostile(static_cast<size_t>(n), 25);
          const float xm = 0.0123f;
          const std::vector<float> want =
              group_order_sums(n, gt, with_fsum ? &fsum : nullptr, [&](int64_t j, int64_t g) {
                const float w = numerics::fp16_from_bits(bits[static_cast<size_t>(j * stride + g)]);
                return static_cast<float>(acc[j * gt + g]) * (xm * w);
              });
          std::vector<float> got(static_cast<size_t>(n), -1.0f);
          grouped_requant_f16(acc.data(), n, gt, xm, ws.data() + 1, stride,
                              with_fsum ? fsum.data() : nullptr, got.data());
          expect_same_bits(got, want);
        }
      }
    }
  }
}

TEST(VecKernels, GroupCorrectionsWrapLikeTheScalarLoop) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> any(std::numeric_limits<int32_t>::min(),
                                             std::numeric_limits<int32_t>::max());
  for (int64_t n : {0, 1, 3, 96}) {
    for (int64_t gt : {1, 7, 8, 18, 33}) {
      for (int variant = 0; variant < 4; ++variant) {
        const bool accumulate = variant & 1, with_off = variant & 2;
        SCOPED_TRACE("n " + std::to_string(n) + " gt " + std::to_string(gt) +
                     (accumulate ? " accumulate" : "") + (with_off ? " off" : ""));
        const size_t cnt = static_cast<size_t>(n * gt);
        std::vector<int32_t> dots(cnt), ts(cnt), start(cnt);
        std::vector<uint32_t> off(cnt), xs(static_cast<size_t>(gt));
        for (size_t e = 0; e < cnt; ++e) {
          dots[e] = any(rng);
          ts[e] = any(rng);
          start[e] = any(rng);
          off[e] = static_cast<uint32_t>(any(rng));
        }
        for (uint32_t& x : xs) x = static_cast<uint32_t>(any(rng));
        const uint32_t xz = static_cast<uint32_t>(any(rng));
        std::vector<int32_t> want = start, got = start;
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t g = 0; g < gt; ++g) {
            const size_t e = static_cast<size_t>(i * gt + g);
            uint32_t v = static_cast<uint32_t>(dots[e]) - xz * static_cast<uint32_t>(ts[e]);
            if (with_off) v -= off[e] * xs[static_cast<size_t>(g)];
            if (accumulate) v += static_cast<uint32_t>(want[e]);
            want[e] = static_cast<int32_t>(v);
          }
        }
        group_corrections(dots.data(), ts.data(), with_off ? off.data() : nullptr, xs.data(), xz, n,
                          gt, accumulate, got.data());
        EXPECT_EQ(got, want);
      }
    }
  }
}

/// The fp16 rounding of an fp64 value written from IEEE 754 here: the nearest binary16 value
/// (ties to the even significand), infinity beyond 65520, NaN kept a NaN.
uint16_t fp16_reference(double d) {
  if (std::isnan(d)) return 0x7E00;
  const uint16_t sign = std::signbit(d) ? 0x8000 : 0;
  const double a = std::fabs(d);
  if (a >= 65520.0) return sign | 0x7C00;
  int e = 0;
  std::frexp(a, &e);                       // a = f * 2^e, f in [0.5, 1)
  const int q = std::max(e - 11, -24);     // the quantum: 2^(e-11) normal, 2^-24 subnormal
  const double steps = std::ldexp(a, -q);  // a / quantum, exact
  double n = std::floor(steps);
  const double frac = steps - n;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(n, 2.0) == 1.0)) n += 1.0;
  const double rounded = std::ldexp(n, q);  // the nearest fp16 value (may be 65504 + carry)
  if (rounded == 0.0) return sign;
  int re = 0;
  std::frexp(rounded, &re);
  if (re - 1 < -14) return sign | static_cast<uint16_t>(std::ldexp(rounded, 24));  // subnormal
  const uint16_t exp = static_cast<uint16_t>(re - 1 + 15);
  const uint16_t man = static_cast<uint16_t>(std::ldexp(rounded, -(re - 1) + 10) - 1024.0);
  return sign | static_cast<uint16_t>(exp << 10) | man;
}

TEST(VecKernels, ScaleRoundFp16RoundsTheFp64ProductOnce) {
  // x · r · w in fp64, then once to fp16: random magnitudes across the fp16 range, exact ties
  // (1 + 2^-11 is halfway between 1 and 1 + 2^-10), carries into the next binade and into
  // infinity, the edges of the fast path (2^-14, 2^15), subnormal and zero results, NaN.
  std::vector<float> x = {1.0f + 0x1p-11f,
                          1.0f + 3 * 0x1p-11f,
                          -1.0f - 0x1p-11f,
                          2047.5f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          0x1p-14f,
                          0x1p-15f,
                          0x1p-25f,
                          0x1.8p-25f,
                          0.0f,
                          -0.0f,
                          32768.0f,
                          3e38f,
                          std::numeric_limits<float>::quiet_NaN(),
                          1.0f - 0x1p-12f};
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-28, 17);
  while (x.size() < 4099) x.push_back((rng() & 1 ? -1.0f : 1.0f) * std::ldexp(mant(rng), ex(rng)));
  for (double r : {1.0, 0.7310585786300049}) {
    SCOPED_TRACE("r " + std::to_string(r));
    std::vector<double> w(x.size());
    for (size_t i = 0; i < w.size(); ++i) w[i] = (i < 17) ? 1.0 : 0.25 + 1.5 * (i % 7) / 7.0;
    std::vector<uint16_t> got(x.size());
    scale_round_fp16(x.data(), r, w.data(), static_cast<int64_t>(x.size()), got.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const double d = static_cast<double>(x[i]) * r * w[i];
      ASSERT_EQ(got[i], fp16_reference(d)) << "x " << x[i] << " d " << d << " at " << i;
      ASSERT_EQ(got[i], numerics::round_fp16_bits(d)) << "at " << i;
    }
  }
}

TEST(VecKernels, RoundFp16RowsRoundsEachFp64ValueOnce) {
  // attention's outputs: fp64 values (not products of floats) rounded once to fp16; values
  // a float cannot hold (ties at fp64 precision just above and below the halfway point),
  // the fast path's edges, subnormal and zero results, overflow, infinities and NaN, at
  // lengths around the four-lane step.
  std::vector<double> v = {1.0 + 0x1p-11,
                           1.0 + 0x1p-11 + 0x1p-40,
                           1.0 + 0x1p-11 - 0x1p-40,
                           -(1.0 + 3 * 0x1p-11),
                           65519.99,
                           65520.0,
                           0x1p-14,
                           0x1p-14 - 0x1p-40,
                           0x1p-24,
                           0x1p-25,
                           0.0,
                           -0.0,
                           1e300,
                           -std::numeric_limits<double>::infinity(),
                           std::numeric_limits<double>::quiet_NaN()};
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> ex(-28, 17);
  while (v.size() < 2051) v.push_back((rng() & 1 ? -1.0 : 1.0) * std::ldexp(mant(rng), ex(rng)));
  for (size_t n : {size_t{0}, size_t{3}, size_t{4}, size_t{15}, v.size()}) {
    std::vector<uint16_t> got(n, 0x1234);
    round_fp16_rows(v.data(), static_cast<int64_t>(n), got.data());
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(got[i], fp16_reference(v[i])) << "v " << v[i] << " at " << i << " of " << n;
      ASSERT_EQ(got[i], numerics::round_fp16_bits(v[i])) << "at " << i;
    }
  }
}

TEST(VecKernels, RotCorrectionsSumChannelsInOrder) {
  for (int64_t n : {0, 1, 8, 15, 16, 17, 40}) {
    for (int64_t hd : {1, 4, 64}) {
      SCOPED_TRACE("n " + std::to_string(n) + " hd " + std::to_string(hd));
      const int64_t ld = n + 3;
      const std::vector<float> q = hostile(static_cast<size_t>(hd), 3);
      const std::vector<float> kt = hostile(static_cast<size_t>(hd * ld), 5);
      std::vector<float> want(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        float s = 0.0f;
        for (int64_t c = 0; c < hd; ++c) s = s + q[c] * kt[c * ld + j];
        want[j] = s;
      }
      std::vector<float> got(static_cast<size_t>(n), -1.0f);
      rot_corrections(q.data(), kt.data(), ld, hd, n, got.data());
      expect_same_bits(got, want);
    }
  }
}

}  // namespace
}  // namespace qbc::runtime
