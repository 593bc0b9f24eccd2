// rotated_key_ranges: every rotated key at every served position lies in the range it
// returns, the range is tight where the pair does not rotate, and it widens with the
// number of positions the cache serves.
#include "qbc/quant/key_ranges.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "qbc/ir/builder.h"
#include "qbc/numerics/rope_frequencies.h"
#include "qbc/support/random.h"

namespace qbc::quant {
namespace {

ir::Node rope_node(int64_t heads, int64_t hd, int64_t rd, double theta, double factor) {
  ir::Node n;
  n.op = ir::Op::kRope;
  n.name = "k_rope";
  std::vector<double> inv;
  for (int64_t i = 0; i < rd / 2; ++i)
    inv.push_back(std::pow(theta, -2.0 * static_cast<double>(i) / rd));
  n.attrs.set("num_heads", heads);
  n.attrs.set("head_dim", hd);
  n.attrs.set("rotary_dim", rd);
  n.attrs.set("inv_freq", inv);
  n.attrs.set("attention_factor", factor);
  n.attrs.set("theta", theta);
  return n;
}

TEST(KeyRanges, EveryRotatedKeyAtEveryPositionIsInside) {
  const int64_t heads = 2, hd = 8, rd = 6, positions = 300;
  const ir::Node rope = rope_node(heads, hd, rd, 10000.0, 1.1);
  // Pre-RoPE keys: a large per-channel offset plus noise, as real low-frequency keys have.
  uint64_t state = 7;
  std::vector<std::vector<double>> keys;
  TensorStats pre;
  pre.channel_min.assign(heads * hd, INFINITY);
  pre.channel_max.assign(heads * hd, -INFINITY);
  pre.channel_absmax.assign(heads * hd, 0.0f);
  pre.pair_radius.assign(heads * rd / 2, 0.0f);
  for (int s = 0; s < 200; ++s) {
    std::vector<double> k(heads * hd);
    for (int64_t c = 0; c < heads * hd; ++c) {
      k[c] = static_cast<float>(3.0 * (c % 4) - 4.0 + 2.0 * (uniform01(state) - 0.5));
      pre.channel_min[c] = std::min(pre.channel_min[c], static_cast<float>(k[c]));
      pre.channel_max[c] = std::max(pre.channel_max[c], static_cast<float>(k[c]));
    }
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < rd / 2; ++i) {
        const double a = k[h * hd + i], b = k[h * hd + i + rd / 2];
        float& r = pre.pair_radius[h * rd / 2 + i];
        r = std::max(r, static_cast<float>(std::sqrt(a * a + b * b)));
      }
    }
    keys.push_back(k);
  }
  const std::vector<ChannelRange> r = rotated_key_ranges(rope, pre, positions);
  ASSERT_EQ(r.size(), static_cast<size_t>(heads * hd));
  const std::vector<double> f = numerics::rope_frequencies(rope.attrs.get_floats("inv_freq"), {},
                                                           0.0, 0, 10000.0, rd, positions - 1);
  const double fac = 1.1, tol = 1e-9;
  for (const auto& k : keys) {
    for (int64_t p = 0; p < positions; ++p) {
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < rd / 2; ++i) {
          const int64_t a = h * hd + i, b = a + rd / 2;
          const double c = fac * std::cos(p * f[i]), s = fac * std::sin(p * f[i]);
          const double ra = k[a] * c - k[b] * s, rb = k[b] * c + k[a] * s;
          ASSERT_GE(ra, r[a].lo - tol) << "pos " << p << " channel " << a;
          ASSERT_LE(ra, r[a].hi + tol) << "pos " << p << " channel " << a;
          ASSERT_GE(rb, r[b].lo - tol) << "pos " << p << " channel " << b;
          ASSERT_LE(rb, r[b].hi + tol) << "pos " << p << " channel " << b;
        }
        // Pair 0 turns through full circles: its range is the radius bound, not the box's.
        const double r0 = fac * pre.pair_radius[h * rd / 2] * (1 + 1e-3);
        EXPECT_LE(r[h * hd].hi, r0 + 1e-12);
        EXPECT_GE(r[h * hd].lo, -r0 - 1e-12);
        for (int64_t c = rd; c < hd; ++c) {  // past rotary_dim: the pre-RoPE range
          EXPECT_EQ(r[h * hd + c].lo, pre.channel_min[h * hd + c]);
          EXPECT_EQ(r[h * hd + c].hi, pre.channel_max[h * hd + c]);
        }
      }
    }
  }
}

TEST(KeyRanges, TightAtOnePositionAndWiderForLongerCaches) {
  const ir::Node rope = rope_node(1, 4, 4, 10000.0, 1.0);
  TensorStats pre;
  pre.channel_min = {-1.0f, 9.0f, -0.5f, -12.0f};
  pre.channel_max = {1.0f, 11.0f, 0.5f, -10.0f};
  pre.channel_absmax = {1.0f, 11.0f, 0.5f, 12.0f};
  const std::vector<ChannelRange> one =
      rotated_key_ranges(rope, pre, 1);  // position 0: no rotation
  for (int c = 0; c < 4; ++c) {
    EXPECT_NEAR(one[c].lo, pre.channel_min[c], 1e-12);
    EXPECT_NEAR(one[c].hi, pre.channel_max[c], 1e-12);
  }
  // Channel 1 (frequency 0.01) keeps its offset over 64 positions, but 4096 positions
  // swing it round: the range must then cover the full circle of radius ~|(10, -11)|.
  const std::vector<ChannelRange> short_r = rotated_key_ranges(rope, pre, 64);
  const std::vector<ChannelRange> long_r = rotated_key_ranges(rope, pre, 4096);
  EXPECT_GT(short_r[1].lo, 5.0);
  EXPECT_LT(long_r[1].lo, -14.0);
  EXPECT_GT(long_r[1].hi, 14.0);
  EXPECT_GT(long_r[3].hi - long_r[3].lo, short_r[3].hi - short_r[3].lo);
}

}  // namespace
}  // namespace qbc::quant

namespace qbc::quant {
namespace {

// rotating_key_offsets: a pair far from 0 takes its pre-RoPE centre as offset and its
// stored keys, rope(k − m), stay inside the (much smaller) returned ranges at every
// position; a pair centred on 0 keeps the plain ranges and no offset.
TEST(KeyRanges, RotatingOffsetsShrinkFarPairsAndContainEveryStoredKey) {
  const int64_t positions = 3000;
  const ir::Node rope = rope_node(1, 4, 4, 10000.0, 1.0);  // pair 0: channels 0, 2; pair 1: 1, 3
  TensorStats pre;
  pre.channel_min = {-1.0f, 19.0f, -0.5f, -7.0f};
  pre.channel_max = {1.0f, 21.0f, 0.5f, -5.0f};
  pre.channel_absmax = {1.0f, 21.0f, 0.5f, 7.0f};
  const RotatingKeyOffsets ro = rotating_key_offsets(rope, pre, positions, /*centered=*/true);
  const std::vector<ChannelRange> plain = rotated_key_ranges(rope, pre, positions);
  EXPECT_EQ(ro.pairs, 1);
  EXPECT_EQ(ro.m[0], 0.0);
  EXPECT_EQ(ro.m[2], 0.0);
  EXPECT_EQ(ro.m[1], 20.0);
  EXPECT_EQ(ro.m[3], -6.0);
  for (int c : {0, 2}) {
    EXPECT_EQ(ro.ranges[c].lo, plain[c].lo);
    EXPECT_EQ(ro.ranges[c].hi, plain[c].hi);
  }
  // Pair 1 (frequency 0.01) turns 30 rad over 3000 positions: without the offset its
  // range is the circle of radius ~21; with it, the spread (half-widths 1, 1).
  EXPECT_GT(plain[1].hi - plain[1].lo, 40.0);
  EXPECT_LT(ro.ranges[1].hi - ro.ranges[1].lo, 3.0);
  uint64_t state = 3;
  const double w = 0.01;
  for (int s = 0; s < 100; ++s) {
    const double a = 19.0 + 2.0 * uniform01(state), b = -7.0 + 2.0 * uniform01(state);
    for (int64_t p = 0; p < positions; p += 7) {
      const double c = std::cos(p * w), sn = std::sin(p * w);
      const double sa = (a - ro.m[1]) * c - (b - ro.m[3]) * sn,
                   sb = (b - ro.m[3]) * c + (a - ro.m[1]) * sn;
      ASSERT_GE(sa, ro.ranges[1].lo) << p;
      ASSERT_LE(sa, ro.ranges[1].hi) << p;
      ASSERT_GE(sb, ro.ranges[3].lo) << p;
      ASSERT_LE(sb, ro.ranges[3].hi) << p;
    }
  }
}

}  // namespace
}  // namespace qbc::quant
