// Per-token key scales and the online Q·K Hadamard of the quantized attention
// (docs/numerics.md "attention"): the rotation is exact in the score (q·k = (Hq)·(Hk)),
// the per-token multiplier maps each key row's reach to qmax, and at 4 bits either makes
// the scores of small keys far more accurate than one static scale does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "qbc/numerics/attention.h"
#include "qbc/numerics/fp16.h"
#include "qbc/numerics/quantizer.h"

namespace qbc::numerics {
namespace {

constexpr int64_t kDim = 8;

/// One head, one KV head of dim 8: static key scales sized for keys of reach 8, no offsets.
Attention one_head(int k_bits, bool token_scale, bool hadamard) {
  Attention a;
  a.heads = 1;
  a.kv_heads = 1;
  a.head_dim = kDim;
  a.max_cache = 64;
  a.scale = 1.0 / std::sqrt(static_cast<double>(kDim));
  a.quantized = true;
  a.k_bits = k_bits;
  a.v_bits = 8;
  a.q_dynamic = true;
  a.q_scale = {1.0f};
  a.k_scale.assign(kDim, static_cast<float>(8.0 / static_cast<double>(quant_max(k_bits))));
  a.v_scale.assign(kDim, 1.0f / 127.0f);
  a.k_offset.assign(kDim, 0.0f);
  a.v_offset.assign(kDim, 0.0f);
  a.k_token_scale = token_scale;
  a.qk_hadamard = hadamard;
  return a;
}

/// fp16 values of a query or key row of the given magnitude, with one outlier channel.
std::vector<float> row(double magnitude, int seed) {
  std::vector<float> x(kDim);
  for (int64_t c = 0; c < kDim; ++c) {
    const double v = std::sin(1.7 * static_cast<double>(c + 1) * (seed + 1)) * magnitude;
    x[static_cast<size_t>(c)] = round_fp16(c == 3 ? 3.0 * v : v);
  }
  return x;
}

/// The quantized score of key `k` for query `q` under `a`.
float score(const Attention& a, const std::vector<float>& q, const std::vector<float>& k) {
  std::vector<int32_t> codes(kDim);
  float t = 0.0f;
  key_codes(k.data(), 0, a, codes.data(), &t);
  QueryCodes qc;
  query_codes(q.data(), 0, a, &qc);
  return key_score(qc, q.data(), codes.data(), nullptr, a, &t);
}

double exact_score(const Attention& a, const std::vector<float>& q, const std::vector<float>& k) {
  double s = 0;
  for (int64_t c = 0; c < kDim; ++c) s += static_cast<double>(q[c]) * k[c];
  return s * a.scale;
}

TEST(Hadamard, OrthonormalAndItsOwnInverse) {
  std::vector<double> x = {1, -2, 3.5, 0.25, -7, 2, 0, 9};
  const std::vector<double> x0 = x;
  double n0 = 0, n1 = 0;
  for (double v : x0) n0 += v * v;
  hadamard_inplace(x.data(), kDim);
  for (double v : x) n1 += v * v;
  EXPECT_NEAR(n1, n0, 1e-12 * n0);
  EXPECT_NEAR(x[0], (1 - 2 + 3.5 + 0.25 - 7 + 2 + 0 + 9) / std::sqrt(8.0), 1e-12);
  hadamard_inplace(x.data(), kDim);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], x0[i], 1e-12) << i;
}

TEST(KeyTokenScale, RowReachMapsToQmax) {
  const Attention a = one_head(4, /*token_scale=*/true, /*hadamard=*/false);
  for (double mag : {0.05, 0.5, 2.0}) {
    const std::vector<float> k = row(mag, 1);
    std::vector<int32_t> codes(kDim);
    float t = 0.0f;
    key_codes(k.data(), 0, a, codes.data(), &t);
    int32_t top = 0;
    for (int32_t c : codes) top = std::max(top, std::abs(c));
    EXPECT_EQ(top, quant_max(4)) << mag;
    EXPECT_EQ(t, round_fp16(t)) << "the multiplier is an fp16 value";
    EXPECT_LT(t, 1.0f) << mag;  // finer than the static scale for rows inside its range
  }
}

TEST(KeyTokenScale, HadamardIsExactInTheScoreAt16Bits) {
  // With 16-bit keys the only differences left are roundings: the rotated and the plain
  // score agree with q·k to well under a 4-bit step.
  const Attention plain = one_head(16, true, false), rotated = one_head(16, true, true);
  for (int s = 0; s < 6; ++s) {
    const std::vector<float> q = row(1.5, s + 7), k = row(0.8 + 0.3 * s, s);
    const double ref = exact_score(plain, q, k);
    const double tol = 0.02 * (std::fabs(ref) + 0.1);
    EXPECT_NEAR(score(plain, q, k), ref, tol) << s;
    EXPECT_NEAR(score(rotated, q, k), ref, tol) << s;
  }
}

TEST(KeyTokenScale, FourBitScoresOfSmallKeysImprove) {
  // Keys far inside the static range: one static 4-bit step is coarse for them; the
  // per-token multiplier (and the rotation, which spreads the outlier channel) is not.
  double err_static = 0, err_token = 0, err_rot = 0;
  const Attention st = one_head(4, false, false), tok = one_head(4, true, false),
                  rot = one_head(4, true, true);
  for (int s = 0; s < 32; ++s) {
    const std::vector<float> q = row(1.0, s + 40), k = row(0.3, s);
    const double ref = exact_score(st, q, k);
    err_static += std::pow(score(st, q, k) - ref, 2);
    err_token += std::pow(score(tok, q, k) - ref, 2);
    err_rot += std::pow(score(rot, q, k) - ref, 2);
  }
  EXPECT_LT(err_token, 0.25 * err_static);
  EXPECT_LT(err_rot, 0.25 * err_static);
}

TEST(KeyTokenScale, AttentionCacheKeepsOneMultiplierPerTokenAndHead) {
  // 16-bit keys: what is left against the float attention is the V and P codes.
  Attention a = one_head(16, true, true);
  a.v_scale.assign(kDim, 2.0f / 127.0f);
  KvCache cache;
  const int64_t s = 5;
  std::vector<float> q, k, v;
  for (int t = 0; t < s; ++t) {
    for (float x : row(1.0, t + 20)) q.push_back(x);
    for (float x : row(0.2 + 0.4 * t, t)) k.push_back(x);
    for (float x : row(0.5, t + 9)) v.push_back(x);
  }
  std::vector<float> y(static_cast<size_t>(s * kDim));
  attention(q.data(), k.data(), v.data(), s, a, cache, y.data());
  ASSERT_EQ(cache.k_token.size(), static_cast<size_t>(s));
  for (int t = 1; t < s; ++t) EXPECT_GT(cache.k_token[t], cache.k_token[t - 1]) << t;
  // The float attention of the same call: the rotation is exact.
  Attention f = a;
  f.quantized = false;
  KvCache fc;
  std::vector<float> yf(y.size());
  attention(q.data(), k.data(), v.data(), s, f, fc, yf.data());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], yf[i], 0.03) << i;
}

TEST(KeyGroups, OneGroupIsThePerRowRule) {
  Attention whole = one_head(4, true, true), one = whole;
  one.k_group = kDim;
  for (int s = 0; s < 8; ++s) {
    const std::vector<float> q = row(1.0, s + 3), k = row(0.2 + 0.3 * s, s);
    std::vector<int32_t> a(kDim), b(kDim);
    float ta = 0.0f, tb = 0.0f;
    key_codes(k.data(), 0, whole, a.data(), &ta);
    key_codes(k.data(), 0, one, b.data(), &tb);
    EXPECT_EQ(a, b) << s;
    EXPECT_EQ(ta, tb) << s;
    const float sa = score(whole, q, k), sb = score(one, q, k);
    EXPECT_EQ(std::memcmp(&sa, &sb, sizeof(float)), 0) << s;
  }
}

TEST(KeyGroups, EachGroupGetsItsOwnMultiplier) {
  Attention a = one_head(4, true, false);
  a.k_group = 4;
  ASSERT_EQ(key_groups(a), 2);
  std::vector<float> k = {0.1f, -0.05f, 0.08f, 0.02f, 3.0f, -2.0f, 1.0f, 0.5f};
  for (float& x : k) x = round_fp16(x);
  std::vector<int32_t> codes(kDim);
  float t[2] = {0.0f, 0.0f};
  key_codes(k.data(), 0, a, codes.data(), t);
  EXPECT_LT(t[0], 0.1f * t[1]);  // the small group keeps a fine step
  for (int g = 0; g < 2; ++g) {
    int32_t top = 0;
    for (int c = 0; c < 4; ++c)
      top = std::max(top, std::abs(codes[static_cast<size_t>(g * 4 + c)]));
    EXPECT_EQ(top, quant_max(4)) << g;
  }
}

/// Keys far from their static offsets on one side: all positive, the offset 0.
std::vector<float> shifted_row(int seed) {
  std::vector<float> x(kDim);
  for (int64_t c = 0; c < kDim; ++c)
    x[static_cast<size_t>(c)] =
        round_fp16(2.0 + 0.4 * std::sin(2.3 * static_cast<double>(c + 1) * (seed + 1)));
  return x;
}

TEST(KeyAsymmetric, CodesSpanTheGroupRangeAndDecodeWithinHalfAStep) {
  Attention a = one_head(4, true, false);
  a.k_asym = true;
  a.k_group = 4;
  for (int s = 0; s < 8; ++s) {
    const std::vector<float> k = shifted_row(s);
    std::vector<int32_t> codes(kDim), z(2);
    float t[2];
    key_codes(k.data(), 0, a, codes.data(), t, z.data());
    for (int g = 0; g < 2; ++g) {
      const float step = a.k_scale[0] * t[g];
      int32_t lo = 127, hi = -128;
      for (int c = 0; c < 4; ++c) {
        const size_t i = static_cast<size_t>(g * 4 + c);
        lo = std::min(lo, codes[i]);
        hi = std::max(hi, codes[i]);
        const double back =
            static_cast<double>(step) * (codes[i] - z[static_cast<size_t>(g)] / 256.0);
        // Half a step inside the range; the top code may be clamped (two roundings).
        const double tol = codes[i] == 7 ? 1.0 : 0.5;
        EXPECT_LE(std::fabs(back - k[i]), tol * step * (1 + 1e-6)) << s << " " << i;
      }
      EXPECT_EQ(lo, -8) << s << " " << g;
      // The full 16 levels unless the step was widened for the zero point (lo / t > 119).
      double ylo = 1e9, yhi = -1e9;
      for (int c = 0; c < 4; ++c) {
        const double y = k[static_cast<size_t>(g * 4 + c)] / static_cast<double>(a.k_scale[0]);
        ylo = std::min(ylo, y);
        yhi = std::max(yhi, y);
      }
      if (ylo / 119.0 < (yhi - ylo) / 15.0) EXPECT_GE(hi, 6) << s << " " << g;
    }
  }
}

TEST(KeyAsymmetric, AGroupFarFromItsOffsetWidensTheStepSoTheZeroPointFits) {
  Attention a = one_head(4, true, false);
  a.k_asym = true;
  a.k_group = 4;
  // Spread 1/64 of the static step, 2 static steps from the offset: the range alone would
  // give a step of about 1/1000 and a zero point near -2000.
  std::vector<float> k(kDim);
  for (int64_t c = 0; c < kDim; ++c)
    k[static_cast<size_t>(c)] = round_fp16(a.k_scale[0] * (2.0 + (c % 4) / 256.0));
  std::vector<int32_t> codes(kDim), z(2);
  float t[2];
  key_codes(k.data(), 0, a, codes.data(), t, z.data());
  for (int g = 0; g < 2; ++g) {
    EXPECT_GE(z[static_cast<size_t>(g)], -32768) << g;
    EXPECT_LE(z[static_cast<size_t>(g)], 32767) << g;
    const float step = a.k_scale[0] * t[g];
    for (int c = 0; c < 4; ++c) {
      const size_t i = static_cast<size_t>(g * 4 + c);
      EXPECT_GE(codes[i], -8) << i;
      EXPECT_LE(codes[i], 7) << i;
      const double back =
          static_cast<double>(step) * (codes[i] - z[static_cast<size_t>(g)] / 256.0);
      EXPECT_LE(std::fabs(back - k[i]), 0.5 * step * (1 + 1e-6)) << i;
    }
  }
}

TEST(KeyAsymmetric, BothEndsOfAGroupDecodeWithinAFractionOfAStep) {
  Attention a = one_head(4, true, false);
  a.k_asym = true;
  a.k_group = 4;
  for (int s = 0; s < 8; ++s) {
    const std::vector<float> k = row(1.0, s);
    std::vector<int32_t> codes(kDim), z(2);
    float t[2];
    key_codes(k.data(), 0, a, codes.data(), t, z.data());
    for (int g = 0; g < 2; ++g) {
      size_t lo = static_cast<size_t>(g * 4), hi = lo;
      for (size_t i = lo; i < static_cast<size_t>(g * 4 + 4); ++i) {
        if (k[i] < k[lo]) lo = i;
        if (k[i] > k[hi]) hi = i;
      }
      const double step = static_cast<double>(a.k_scale[0]) * t[g];
      if (step * 15.0 < (k[hi] - k[lo]) * (1.0 - 1e-3)) continue;  // step widened: not the case
      for (size_t i : {lo, hi}) {
        const double back = step * (codes[i] - z[static_cast<size_t>(g)] / 256.0);
        // The fp16 step and the 1/256 zero point: a few thousandths of a step, not a half.
        EXPECT_LE(std::fabs(back - k[i]), 0.01 * step) << s << " " << i;
      }
    }
  }
}

TEST(KeyHadamard, WithKeyGroupsEachGroupIsRotatedOnItsOwn) {
  // Energy only in group 0: with per-group rotations group 1's codes stay 0; the one
  // rotation over the whole head spreads it into both groups.
  Attention blocks = one_head(8, true, true), whole = blocks;
  blocks.k_group = 4;
  std::vector<float> k(kDim, 0.0f);
  k[0] = 1.0f;
  k[1] = -0.5f;
  std::vector<int32_t> cb(kDim), cw(kDim);
  float tb[2], tw = 0.0f;
  key_codes(k.data(), 0, blocks, cb.data(), tb);
  key_codes(k.data(), 0, whole, cw.data(), &tw);
  for (int c = 4; c < 8; ++c) EXPECT_EQ(cb[static_cast<size_t>(c)], 0) << c;
  int nonzero = 0;
  for (int c = 4; c < 8; ++c) nonzero += cw[static_cast<size_t>(c)] != 0;
  EXPECT_EQ(nonzero, 4);
  // Still exact in the score: the per-group rotation is orthonormal, so the quantized
  // score stays close to the exact one.
  const std::vector<float> q = row(1.0, 7);
  const double ref = exact_score(blocks, q, k);
  EXPECT_NEAR(score(blocks, q, k), ref, 0.02 * (1.0 + std::fabs(ref)));
}

TEST(KeyAsymmetric, ScoreSubtractsTheZeroPointTimesTheQuerySum) {
  Attention a = one_head(4, true, true);
  a.k_asym = true;
  a.k_group = 4;
  const std::vector<float> q = row(1.2, 5), k = shifted_row(3);
  std::vector<int32_t> codes(kDim), z(2);
  float t[2];
  key_codes(k.data(), 0, a, codes.data(), t, z.data());
  QueryCodes qc;
  query_codes(q.data(), 0, a, &qc);
  float want = 0.0f;
  for (int g = 0; g < 2; ++g) {
    int64_t acc = 0;
    for (int c = g * 4; c < g * 4 + 4; ++c)
      acc += int64_t{qc.codes[static_cast<size_t>(c)]} *
             (256 * codes[static_cast<size_t>(c)] - z[static_cast<size_t>(g)]);
    const float sg = static_cast<float>(acc) * (qc.mq / 256.0f) * t[g];
    want = g == 0 ? sg : want + sg;
  }
  const float got = key_score(qc, q.data(), codes.data(), nullptr, a, t, z.data());
  EXPECT_EQ(std::memcmp(&got, &want, sizeof(float)), 0) << got << " " << want;
}

TEST(KeyAsymmetric, FourBitScoresOfOneSidedKeysImprove) {
  Attention sym = one_head(4, true, false), asym = sym;
  asym.k_asym = true;
  double err_sym = 0, err_asym = 0;
  for (int s = 0; s < 32; ++s) {
    const std::vector<float> q = row(1.0, s + 40), k = shifted_row(s);
    const double ref = exact_score(sym, q, k);
    err_sym += std::pow(score(sym, q, k) - ref, 2);
    std::vector<int32_t> codes(kDim), z(1);
    float t = 0.0f;
    key_codes(k.data(), 0, asym, codes.data(), &t, z.data());
    QueryCodes qc;
    query_codes(q.data(), 0, asym, &qc);
    err_asym +=
        std::pow(key_score(qc, q.data(), codes.data(), nullptr, asym, &t, z.data()) - ref, 2);
  }
  EXPECT_LT(err_asym, 0.25 * err_sym);
}

TEST(ValueTokenScale, OneKeyOutputIsTheDocumentedRule) {
  // One cached token: its exponent code is 255 = the sum, so y_c = fp16(m · code_c / 64 ·
  // s_v + o_v) with m the ceiling of the row's reach in 1/64 units.
  Attention a = one_head(8, false, false);
  a.v_bits = 4;
  a.v_scale.assign(kDim, static_cast<float>(4.0 / 7.0));
  a.v_token_scale = true;
  KvCache cache;
  const std::vector<float> q = row(1.0, 2), k = row(0.5, 1), v = row(0.3, 4);
  std::vector<float> y(kDim);
  attention(q.data(), k.data(), v.data(), 1, a, cache, y.data());
  ASSERT_EQ(cache.v_token.size(), 1u);
  double reach = 0.0;
  for (float x : v) reach = std::max(reach, std::fabs(static_cast<double>(x)) / a.v_scale[0] / 7.0);
  const int32_t m = cache.v_token[0];
  EXPECT_EQ(m, static_cast<int32_t>(std::ceil(64.0 * reach)));
  for (int64_t c = 0; c < kDim; ++c) {
    const int32_t code = cache.v_codes[static_cast<size_t>(c)];
    EXPECT_LE(std::abs(code), 8);
    const float want = round_fp16(static_cast<double>(int64_t{255} * m * code) / 255.0 *
                                  static_cast<double>(a.v_scale[0] / 64.0f));
    EXPECT_EQ(y[static_cast<size_t>(c)], want) << c;
  }
}

TEST(ValueTokenScale, FourBitOutputsOfSmallValuesImprove) {
  Attention st = one_head(8, false, false);
  st.v_bits = 4;
  st.v_scale.assign(kDim, static_cast<float>(4.0 / 7.0));
  Attention tok = st, f = st;
  tok.v_token_scale = true;
  f.quantized = false;
  const int64_t s = 12;
  std::vector<float> q, k, v;
  for (int t = 0; t < s; ++t) {
    for (float x : row(0.7, t + 20)) q.push_back(x);
    for (float x : row(0.6, t)) k.push_back(x);
    for (float x : row(0.1 + 0.05 * t, t + 9)) v.push_back(x);
  }
  std::vector<float> ys(q.size()), yt(q.size()), yf(q.size());
  KvCache c1, c2, c3;
  attention(q.data(), k.data(), v.data(), s, st, c1, ys.data());
  attention(q.data(), k.data(), v.data(), s, tok, c2, yt.data());
  attention(q.data(), k.data(), v.data(), s, f, c3, yf.data());
  double es = 0, et = 0;
  for (size_t i = 0; i < yf.size(); ++i) {
    es += std::pow(ys[i] - yf[i], 2);
    et += std::pow(yt[i] - yf[i], 2);
  }
  EXPECT_LT(et, 0.25 * es);
}

}  // namespace
}  // namespace qbc::numerics
