// Per-token key scales and the online Q·K Hadamard of the quantized attention
// (docs/numerics.md "attention"): the rotation is exact in the score (q·k = (Hq)·(Hk)),
// the per-token multiplier maps each key row's reach to qmax, and at 4 bits either makes
// the scores of small keys far more accurate than one static scale does.
#include <gtest/gtest.h>

#include <cmath>
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
  return key_score(qc, q.data(), codes.data(), nullptr, a, t);
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

}  // namespace
}  // namespace qbc::numerics
