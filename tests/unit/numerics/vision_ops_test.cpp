// The vision ops' kernels (docs/numerics.md "gelu", "rope_table", "full_attention"): values
// worked out by hand or from the definitions, segment isolation, and the quantized rules'
// tile invariance (a split of the segments' rows does not change a bit).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "qbc/numerics/attention.h"
#include "qbc/numerics/elementwise.h"
#include "qbc/numerics/fp16.h"
#include "qbc/numerics/rope.h"

namespace qbc::numerics {
namespace {

TEST(NumericsVision, GeluIsTheErfForm) {
  // Φ(1) = 0.841344746068543, Φ(−1) = 0.158655253931457 (the normal distribution's table).
  EXPECT_EQ(gelu_value(0.0f), 0.0f);
  EXPECT_NEAR(gelu_value(1.0f), 0.841344746068543, 1e-7);
  EXPECT_NEAR(gelu_value(-1.0f), -0.158655253931457, 1e-7);
  EXPECT_NEAR(gelu_value(3.0f), 3.0 * 0.998650101968370, 1e-6);  // Φ(3)
  const float x[3] = {1.0f, -1.0f, 0.5f};
  float y[3];
  gelu(x, 3, /*fp16=*/true, y);
  EXPECT_EQ(y[0], round_fp16(gelu_value(1.0f)));
  EXPECT_EQ(y[1], round_fp16(gelu_value(-1.0f)));
  gelu(x, 3, /*fp16=*/false, y);
  EXPECT_EQ(y[2], gelu_value(0.5f));
}

TEST(NumericsVision, RopeTableRotatesHalves) {
  // One head of dim 4: pairs (0, 2) and (1, 3). Pair 0 turned by 90° (c 0, s 1), pair 1 by 0°.
  const float x[4] = {1.0f, 0.5f, 0.0f, 2.0f};
  const float cs[2] = {0.0f, 1.0f}, sn[2] = {1.0f, 0.0f};
  float y[4];
  rope_table(x, cs, sn, 1, 1, 4, y);
  EXPECT_EQ(y[0], 0.0f);  // 1·0 − 0·1
  EXPECT_EQ(y[2], 1.0f);  // 0·0 + 1·1
  EXPECT_EQ(y[1], 0.5f);
  EXPECT_EQ(y[3], 2.0f);
  // Two rows, two heads: each row its own table row; the second row turned by 180°.
  const float x2[16] = {1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8};
  const float c2[4] = {1, 1, -1, -1}, s2[4] = {0, 0, 0, 0};
  float y2[16];
  rope_table(x2, c2, s2, 2, 2, 4, y2);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(y2[i], x2[i]);
    EXPECT_EQ(y2[8 + i], -x2[8 + i]);
  }
}

Attention two_heads() {
  Attention p;
  p.heads = p.kv_heads = 2;
  p.head_dim = 4;
  p.scale = 0.5;
  return p;
}

std::vector<float> ramp(int64_t n, double step, double base) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = round_fp16(base + step * static_cast<double>((i * 7) % 13));
  return v;
}

TEST(NumericsVision, FullAttentionOneKeyGivesItsValue) {
  const Attention p = two_heads();
  const std::vector<float> q = ramp(8, 0.1, -0.4), k = ramp(8, 0.2, 0.1), v = ramp(8, 0.3, -1.0);
  std::vector<float> y(8);
  full_attention(q.data(), k.data(), v.data(), 1, p, {}, y.data());
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(y[i], v[i]);  // softmax of one score is 1
}

TEST(NumericsVision, FullAttentionSegmentsAreIsolated) {
  for (bool quantized : {false, true}) {
    Attention p = two_heads();
    if (quantized) {
      p.quantized = true;
      p.q_scale = {0.01f, 0.01f};
      p.k_scale.assign(8, 0.02f);
      p.v_scale.assign(8, 0.03f);
      p.k_offset.assign(8, 0.1f);
      p.v_offset.assign(8, -0.2f);
    }
    const int64_t s = 5, w = 8;
    const std::vector<float> q = ramp(s * w, 0.1, -0.5), k = ramp(s * w, 0.15, -0.8);
    std::vector<float> v = ramp(s * w, 0.2, -1.1);
    std::vector<float> a(static_cast<size_t>(s * w)), b(a.size()), whole(a.size());
    full_attention(q.data(), k.data(), v.data(), s, p, {2, 3}, a.data());
    // The first segment alone (rows 0, 1) and the second alone (rows 2..4) give the same bits.
    std::vector<float> first(16), second(24);
    full_attention(q.data(), k.data(), v.data(), 2, p, {}, first.data());
    full_attention(q.data() + 16, k.data() + 16, v.data() + 16, 3, p, {}, second.data());
    for (size_t i = 0; i < 16; ++i) EXPECT_EQ(a[i], first[i]) << quantized << " " << i;
    for (size_t i = 0; i < 24; ++i) EXPECT_EQ(a[16 + i], second[i]) << quantized << " " << i;
    // Changing a value of the second segment leaves the first segment's outputs alone.
    v[20] = round_fp16(v[20] + 1.0);
    full_attention(q.data(), k.data(), v.data(), s, p, {2, 3}, b.data());
    for (size_t i = 0; i < 16; ++i) EXPECT_EQ(a[i], b[i]);
    // Without segments every token sees every token: the first rows change.
    full_attention(q.data(), k.data(), v.data(), s, p, {}, whole.data());
    bool differs = false;
    for (size_t i = 0; i < 16; ++i) differs |= whole[i] != b[i];
    EXPECT_TRUE(differs) << quantized;
  }
}

TEST(NumericsVision, FullAttentionQuantizedOutputIsAnAverageOfValueCodes) {
  // Equal keys: every exponent code is 255, so each output is the mean of the V codes times
  // the scale plus the offset, rounded once.
  Attention p = two_heads();
  p.quantized = true;
  p.q_scale = {0.01f, 0.01f};
  p.k_scale.assign(8, 0.02f);
  p.v_scale.assign(8, 0.5f);
  p.k_offset.assign(8, 0.0f);
  p.v_offset.assign(8, 0.25f);
  const std::vector<float> q = ramp(24, 0.1, -0.5);
  std::vector<float> k(24, 0.3f), v(24, 0.0f), y(24);
  for (int t = 0; t < 3; ++t) v[static_cast<size_t>(t * 8)] = static_cast<float>(t + 1);  // codes
  full_attention(q.data(), k.data(), v.data(), 3, p, {}, y.data());
  // Channel 0: values 1, 2, 3 -> codes rne((x − 0.25) / 0.5) = 2 (1.5 ties to even), 4 (3.5), 6
  // (5.5).
  const float want = round_fp16((2.0 + 4.0 + 6.0) / 3.0 * 0.5 + 0.25);
  for (int t = 0; t < 3; ++t) EXPECT_EQ(y[static_cast<size_t>(t * 8)], want) << t;
}

}  // namespace
}  // namespace qbc::numerics
