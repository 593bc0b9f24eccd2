// numerics::attention with `span` (a call that is one bidirectional span: Gemma 3's image
// tokens under HF's token-type or-mask): every row of the call sees the call's later keys, and
// a sliding window reaches back at least to the span's first position. Checked against a float
// softmax over exactly the keys the rule names (written here from HF's mask: row p of a span
// [a, b] sees [min(p - window + 1, a), b]), and against the causal rule, which the span's last
// row must equal bit for bit (it sees the same keys).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "qbc/numerics/attention.h"
#include "qbc/numerics/fp16.h"

namespace qbc::numerics {
namespace {

constexpr int64_t kHeads = 2, kDim = 8;

std::vector<float> random_rows(int64_t rows, int64_t width, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(rows * width));
  for (float& x : v) x = round_fp16(g(rng));
  return v;
}

Attention float_attention(int64_t window) {
  Attention a;
  a.heads = kHeads;
  a.kv_heads = 1;
  a.head_dim = kDim;
  a.window = window;
  a.max_cache = 64;
  a.scale = 1.0 / std::sqrt(static_cast<double>(kDim));
  return a;
}

/// A quantized attention with static scales wide enough for the random rows.
Attention quantized_attention(int64_t window) {
  Attention a = float_attention(window);
  a.quantized = true;
  a.q_scale.assign(kHeads, 4.0f / 127.0f);
  a.k_scale.assign(kDim, 4.0f / 127.0f);
  a.v_scale.assign(kDim, 4.0f / 127.0f);
  a.k_offset.assign(kDim, 0.0f);
  a.v_offset.assign(kDim, 0.0f);
  return a;
}

/// Row `t` of head `h` over keys [lo, hi] of the float cache, in double: the rule's meaning.
std::vector<double> reference_row(const std::vector<float>& q, const KvCache& c, int64_t t,
                                  int64_t h, int64_t lo, int64_t hi, double scale) {
  std::vector<double> s;
  for (int64_t j = lo; j <= hi; ++j) {
    double dot = 0;
    for (int64_t i = 0; i < kDim; ++i)
      dot += static_cast<double>(q[static_cast<size_t>(t * kHeads * kDim + h * kDim + i)]) *
             c.k_values[static_cast<size_t>(j * kDim + i)];
    s.push_back(dot * scale);
  }
  const double mx = *std::max_element(s.begin(), s.end());
  double sum = 0;
  for (double& x : s) sum += (x = std::exp(x - mx));
  std::vector<double> y(kDim, 0.0);
  for (int64_t j = lo; j <= hi; ++j)
    for (int64_t i = 0; i < kDim; ++i)
      y[static_cast<size_t>(i)] +=
          s[static_cast<size_t>(j - lo)] / sum * c.v_values[static_cast<size_t>(j * kDim + i)];
  return y;
}

struct SpanRun {
  KvCache cache;
  std::vector<float> prefix_y, y;
};

/// A causal call of `prefix` tokens, then a call of `span` tokens (a span call when `as_span`).
SpanRun run(const Attention& a, int64_t prefix, int64_t span, bool as_span) {
  SpanRun r;
  const std::vector<float> q0 = random_rows(prefix, kHeads * kDim, 1);
  const std::vector<float> k0 = random_rows(prefix, kDim, 2), v0 = random_rows(prefix, kDim, 3);
  r.prefix_y.resize(q0.size());
  attention(q0.data(), k0.data(), v0.data(), prefix, a, r.cache, r.prefix_y.data());
  const std::vector<float> q = random_rows(span, kHeads * kDim, 4);
  const std::vector<float> k = random_rows(span, kDim, 5), v = random_rows(span, kDim, 6);
  r.y.resize(q.size());
  attention(q.data(), k.data(), v.data(), span, a, r.cache, r.y.data(), as_span);
  return r;
}

// Without a window: every row of the span sees every key up to the span's end; the float rule
// equals the reference, and the rows differ from the causal rule's except the last.
TEST(SpanAttention, EveryRowSeesTheWholeSpan) {
  const int64_t prefix = 3, span = 5;
  const SpanRun s = run(float_attention(0), prefix, span, true);
  const SpanRun c = run(float_attention(0), prefix, span, false);
  const std::vector<float> q = random_rows(span, kHeads * kDim, 4);
  for (int64_t t = 0; t < span; ++t) {
    for (int64_t h = 0; h < kHeads; ++h) {
      const std::vector<double> want =
          reference_row(q, s.cache, t, h, 0, prefix + span - 1, 1.0 / std::sqrt(8.0));
      for (int64_t i = 0; i < kDim; ++i) {
        const size_t at = static_cast<size_t>(t * kHeads * kDim + h * kDim + i);
        EXPECT_NEAR(s.y[at], want[static_cast<size_t>(i)], 2e-3) << t << " " << h << " " << i;
      }
    }
  }
  const size_t row = kHeads * kDim;
  EXPECT_FALSE(std::equal(s.y.begin(), s.y.begin() + row, c.y.begin()));  // row 0 sees more
  EXPECT_TRUE(std::equal(s.y.end() - row, s.y.end(), c.y.end() - row));   // the last: the same
  EXPECT_EQ(s.prefix_y, c.prefix_y);  // the calls before the span are causal
}

// A sliding window of 2 over a span of 4 after 3 tokens: row p sees [min(p - 1, 3), 6], so
// row 0 (position 3) reaches back to 2 and the later rows to the span's start, 3, not beyond.
TEST(SpanAttention, AWindowReachesBackToTheSpanStart) {
  const int64_t prefix = 3, span = 4, window = 2;
  const SpanRun s = run(float_attention(window), prefix, span, true);
  const std::vector<float> q = random_rows(span, kHeads * kDim, 4);
  const int64_t lows[4] = {2, 3, 3, 3};
  for (int64_t t = 0; t < span; ++t) {
    for (int64_t h = 0; h < kHeads; ++h) {
      const std::vector<double> want =
          reference_row(q, s.cache, t, h, lows[t], prefix + span - 1, 1.0 / std::sqrt(8.0));
      for (int64_t i = 0; i < kDim; ++i) {
        const size_t at = static_cast<size_t>(t * kHeads * kDim + h * kDim + i);
        EXPECT_NEAR(s.y[at], want[static_cast<size_t>(i)], 2e-3) << t << " " << h << " " << i;
      }
    }
  }
}

// The integer rule: a span's last row equals the causal rule's bit for bit (the same keys, the
// same exact max and codes), its first row does not, and the span's error against the float
// span rule is of the size of the causal rule's against the float causal rule (the span adds no
// error of its own).
TEST(SpanAttention, QuantizedSpanKeepsTheIntegerRule) {
  const int64_t prefix = 3, span = 5;
  const SpanRun s = run(quantized_attention(0), prefix, span, true);
  const SpanRun c = run(quantized_attention(0), prefix, span, false);
  const SpanRun fs = run(float_attention(0), prefix, span, true);
  const SpanRun fc = run(float_attention(0), prefix, span, false);
  const size_t row = kHeads * kDim;
  EXPECT_TRUE(std::equal(s.y.end() - row, s.y.end(), c.y.end() - row));
  EXPECT_FALSE(std::equal(s.y.begin(), s.y.begin() + row, c.y.begin()));
  double err_span = 0, err_causal = 0;
  for (size_t i = 0; i < s.y.size(); ++i) {
    err_span = std::max(err_span, std::fabs(static_cast<double>(s.y[i]) - fs.y[i]));
    err_causal = std::max(err_causal, std::fabs(static_cast<double>(c.y[i]) - fc.y[i]));
  }
  EXPECT_GT(err_causal, 0.0);
  EXPECT_LT(err_span, 2.0 * err_causal) << err_span << " vs " << err_causal;
}

}  // namespace
}  // namespace qbc::numerics
