// Unit tests of ref::Session on small hand-built graphs: each op against a direct
// implementation of docs/ir.md in double precision, GQA against explicitly repeated KV
// heads, sliding windows, the KV cache limit, token validation and float64 mode.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "qbc/ir/builder.h"
#include "qbc/ref/session.h"
#include "test_support.h"

namespace qbc::ref {
namespace {

using ir::DType;
using ir::TensorType;
using ir::ValueId;

TensorType act(int64_t n) { return TensorType{DType::kF32, {ir::kDynamic, ir::kDynamic, n}}; }

std::vector<float> randn(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

/// A graph under construction with inputs inputs_embeds [.., hidden] and positions, a host
/// embedding table and weights held in memory.
struct TestGraph {
  explicit TestGraph(int64_t hidden, int64_t vocab = 16) : hidden(hidden) {
    add_weight("token_embd.weight", {vocab, hidden}, randn(static_cast<size_t>(vocab * hidden), 7),
               ir::WeightRole::kHostEmbedding);
    x = *b.input("inputs_embeds", act(hidden));
    pos = *b.input("positions", TensorType{DType::kI64, {ir::kDynamic, ir::kDynamic}});
  }
  void add_weight(const std::string& name, std::vector<int64_t> dims, std::vector<float> v,
                  ir::WeightRole role = ir::WeightRole::kParameter) {
    b.weight(name, TensorType{DType::kF32, std::move(dims)}, name, role);
    data[name] = std::move(v);
  }
  StatusOr<std::unique_ptr<Session>> session(ValueId out, SessionOptions o = {}) {
    g.clear_outputs();
    g.add_output(out);
    return Session::create(
        g,
        [this](const ir::Weight& w, std::vector<float>* v) -> Status {
          auto it = data.find(w.tensor);
          if (it == data.end()) return not_found("no data for ", w.tensor);
          *v = it->second;
          return ok_status();
        },
        o);
  }

  int64_t hidden;
  ir::Graph g{"test"};
  ir::Builder b{g};
  std::map<std::string, std::vector<float>> data;
  ValueId x = -1;
  ValueId pos = -1;
};

/// Runs `x` [s, hidden] through a fresh session, whole or one token at a time.
std::vector<float> run(Session& s, const std::vector<float>& x, int64_t seq,
                       bool stepwise = false) {
  std::vector<float> out;
  if (!stepwise) {
    EXPECT_TRUE(s.forward_embeds(x, seq, &out).ok());
    return out;
  }
  const int64_t h = s.hidden_size();
  for (int64_t i = 0; i < seq; ++i) {
    std::vector<float> one(x.begin() + i * h, x.begin() + (i + 1) * h), y;
    EXPECT_TRUE(s.forward_embeds(one, 1, &y).ok());
    out.insert(out.end(), y.begin(), y.end());
  }
  return out;
}

void expect_near(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

TEST(EvaluatorTest, RmsNormGroupAndUnitOffset) {
  for (int unit_offset : {0, 1}) {
    TestGraph t(8);
    const auto w = randn(4, 3);
    t.add_weight("norm.weight", {4}, w);
    auto n = t.b.rms_norm("norm", t.x, "norm.weight", 1e-5, unit_offset != 0, 4, "m.norm");
    QBC_ASSERT_OK(n);
    auto s = t.session(*n);
    QBC_ASSERT_OK(s);
    const auto x = randn(3 * 8, 11, 2.0f);
    std::vector<double> want(x.size());
    for (size_t grp = 0; grp < 6; ++grp) {
      double ms = 0;
      for (size_t i = 0; i < 4; ++i) ms += double(x[grp * 4 + i]) * x[grp * 4 + i] / 4.0;
      for (size_t i = 0; i < 4; ++i)
        want[grp * 4 + i] = x[grp * 4 + i] / std::sqrt(ms + 1e-5) * (w[i] + unit_offset);
    }
    expect_near(run(**s, x, 3), want, 1e-5);
  }
}

/// q | k | v packed in inputs_embeds, attention over slices of it.
struct AttnGraph {
  AttnGraph(int64_t H, int64_t KV, int64_t d, int64_t window, double softcap,
            int64_t max_cache = 64)
      : t(H * d + 2 * KV * d) {
    ValueId q = *t.b.slice("q", t.x, 0, H * d, "");
    ValueId k = *t.b.slice("k", t.x, H * d, H * d + KV * d, "");
    ValueId v = *t.b.slice("v", t.x, H * d + KV * d, H * d + 2 * KV * d, "");
    ir::AttentionParams p;
    p.num_heads = H;
    p.num_kv_heads = KV;
    p.head_dim = d;
    p.scale = 1.0 / std::sqrt(static_cast<double>(d));
    p.softcap = softcap;
    p.window = window;
    p.max_cache = max_cache;
    out = *t.b.attention("blk.0.attn.sdpa", q, k, v, p, "m.attn");
  }
  TestGraph t;
  ValueId out = -1;
};

/// docs/ir.md attention in double over packed rows [s][H·d + 2·KV·d].
std::vector<double> ref_attention(const std::vector<float>& x, int64_t s, int64_t H, int64_t KV,
                                  int64_t d, int64_t window, double softcap) {
  const int64_t w = H * d + 2 * KV * d;
  std::vector<double> out(static_cast<size_t>(s * H * d), 0.0);
  for (int64_t p = 0; p < s; ++p) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvh = h / (H / KV);
      std::vector<double> sc;
      std::vector<int64_t> js;
      for (int64_t j = 0; j <= p; ++j) {
        if (window > 0 && p - j >= window) continue;
        double dot = 0;
        for (int64_t i = 0; i < d; ++i)
          dot += double(x[p * w + h * d + i]) * x[j * w + H * d + kvh * d + i];
        dot /= std::sqrt(static_cast<double>(d));
        if (softcap > 0) dot = softcap * std::tanh(dot / softcap);
        sc.push_back(dot);
        js.push_back(j);
      }
      double mx = sc[0], sum = 0;
      for (double v : sc) mx = std::max(mx, v);
      for (double& v : sc) sum += (v = std::exp(v - mx));
      for (size_t n = 0; n < js.size(); ++n) {
        for (int64_t i = 0; i < d; ++i) {
          out[static_cast<size_t>(p * H * d + h * d + i)] +=
              sc[n] / sum * x[js[n] * w + H * d + KV * d + kvh * d + i];
        }
      }
    }
  }
  return out;
}

TEST(EvaluatorTest, AttentionMatchesSpecWithWindowSoftcapAndCache) {
  struct Case {
    int64_t H, KV, window;
    double softcap;
  };
  for (const Case& c :
       {Case{4, 2, 0, 0.0}, Case{4, 1, 3, 0.0}, Case{2, 2, 0, 5.0}, Case{4, 2, 2, 2.0}}) {
    const int64_t d = 4, s = 7;
    AttnGraph a(c.H, c.KV, d, c.window, c.softcap);
    auto sess = a.t.session(a.out);
    QBC_ASSERT_OK(sess);
    const auto x = randn(static_cast<size_t>(s * a.t.hidden), 5, 1.5f);
    const auto want = ref_attention(x, s, c.H, c.KV, d, c.window, c.softcap);
    expect_near(run(**sess, x, s), want, 1e-5);
    (*sess)->reset();
    expect_near(run(**sess, x, s, /*stepwise=*/true), want, 1e-5);
    // Prefill 3 then 4 more: cached keys from the first call are used.
    (*sess)->reset();
    std::vector<float> out =
        run(**sess, std::vector<float>(x.begin(), x.begin() + 3 * a.t.hidden), 3);
    const auto rest = run(**sess, std::vector<float>(x.begin() + 3 * a.t.hidden, x.end()), 4);
    out.insert(out.end(), rest.begin(), rest.end());
    expect_near(out, want, 1e-5);
    EXPECT_EQ((*sess)->position(), s);
  }
}

TEST(EvaluatorTest, GqaEqualsExplicitlyRepeatedKvHeads) {
  const int64_t H = 6, KV = 2, d = 4, s = 5;
  AttnGraph gqa(H, KV, d, 0, 0.0);
  AttnGraph mha(H, H, d, 0, 0.0);
  auto sg = gqa.t.session(gqa.out);
  auto sm = mha.t.session(mha.out);
  QBC_ASSERT_OK(sg);
  QBC_ASSERT_OK(sm);
  const auto x = randn(static_cast<size_t>(s * gqa.t.hidden), 9);
  // Build the MHA input: KV head h / (H / KV) copied to every query head of its group.
  std::vector<float> xr;
  for (int64_t p = 0; p < s; ++p) {
    const float* row = x.data() + p * gqa.t.hidden;
    xr.insert(xr.end(), row, row + H * d);
    for (int64_t part = 0; part < 2; ++part) {
      for (int64_t h = 0; h < H; ++h) {
        const float* src = row + H * d + part * KV * d + (h / (H / KV)) * d;
        xr.insert(xr.end(), src, src + d);
      }
    }
  }
  const auto a = run(**sg, x, s);
  const auto b = run(**sm, xr, s);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << i;
}

TEST(EvaluatorTest, SlidingWindowIgnoresTokensOutsideTheWindow) {
  const int64_t H = 2, KV = 1, d = 4, s = 6, window = 2;
  AttnGraph win(H, KV, d, window, 0.0);
  auto sess = win.t.session(win.out);
  QBC_ASSERT_OK(sess);
  auto x = randn(static_cast<size_t>(s * win.t.hidden), 21);
  const auto base = run(**sess, x, s);
  // Changing token 0's key and value must not change the outputs of positions >= window.
  for (int64_t i = H * d; i < win.t.hidden; ++i) x[static_cast<size_t>(i)] += 3.0f;
  (*sess)->reset();
  const auto changed = run(**sess, x, s);
  const int64_t row = H * d;
  for (int64_t p = 0; p < s; ++p) {
    double diff = 0;
    for (int64_t i = 0; i < row; ++i)
      diff = std::max(diff, double(std::abs(base[p * row + i] - changed[p * row + i])));
    if (p < window) {
      EXPECT_GT(diff, 1e-3) << "position " << p << " sees token 0";
    } else {
      EXPECT_EQ(diff, 0.0) << "position " << p << " is outside token 0's window";
    }
  }
}

TEST(EvaluatorTest, SoftcapScaleAddAndGatedActs) {
  TestGraph t(4);
  ValueId cap = *t.b.softcap("cap", t.x, 2.0, "");
  ValueId sc = *t.b.scale("sc", cap, 3.0, "");
  ValueId sum = *t.b.add("sum", sc, t.x, "");
  ValueId silu = *t.b.gated_act("silu", sum, t.x, "silu", "");
  ValueId gelu = *t.b.gated_act("gelu", silu, t.x, "gelu_tanh", "");
  auto s = t.session(gelu);
  QBC_ASSERT_OK(s);
  (*s)->set_keep_activations(true);
  const auto x = randn(8, 4, 3.0f);
  const auto got = run(**s, x, 2);
  std::vector<double> want_cap, want;
  for (float xi : x) {
    const double c = 2.0 * std::tanh(xi / 2.0);
    const double z = 3.0 * c + xi;
    const double si = z / (1.0 + std::exp(-z)) * xi;
    const double ge =
        0.5 * si * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (si + 0.044715 * si * si * si))) * xi;
    want_cap.push_back(c);
    want.push_back(ge);
  }
  expect_near(got, want, 1e-4);
  std::vector<float> a;
  std::vector<int64_t> shape;
  QBC_ASSERT_OK((*s)->activation("cap", &a, &shape));
  EXPECT_EQ(shape, (std::vector<int64_t>{1, 2, 4}));
  expect_near(a, want_cap, 1e-6);
  EXPECT_EQ((*s)->activation("nope", &a, &shape).code(), Code::kNotFound);
}

TEST(EvaluatorTest, LinearWithBiasAndRope) {
  const int64_t heads = 2, hd = 6, rot = 4, n = heads * hd, s = 5;
  TestGraph t(n);
  const auto w = randn(static_cast<size_t>(n * n), 1), bias = randn(static_cast<size_t>(n), 2);
  t.add_weight("lin.weight", {n, n}, w);
  t.add_weight("lin.bias", {n}, bias);
  ValueId lin = *t.b.linear("lin", t.x, "lin.weight", "lin.bias", "");
  numerics::Rope rp;
  rp.heads = heads;
  rp.head_dim = hd;
  rp.rotary_dim = rot;
  rp.inv_freq = {1.0, 0.1};
  rp.attention_factor = 1.5;
  auto r = t.b.rope("rope", lin, t.pos, rp, "");
  QBC_ASSERT_OK(r);
  auto sess = t.session(*r);
  QBC_ASSERT_OK(sess);
  const auto x = randn(static_cast<size_t>(s * n), 3);
  std::vector<double> want;
  for (int64_t p = 0; p < s; ++p) {
    std::vector<double> y(static_cast<size_t>(n));
    for (int64_t o = 0; o < n; ++o) {
      double acc = bias[o];
      for (int64_t i = 0; i < n; ++i) acc += double(x[p * n + i]) * w[o * n + i];
      y[o] = acc;
    }
    std::vector<double> z = y;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < rot / 2; ++i) {
        const double th = p * rp.inv_freq[i], c = std::cos(th) * 1.5, sn = std::sin(th) * 1.5;
        const double a = y[h * hd + i], b = y[h * hd + i + rot / 2];
        z[h * hd + i] = a * c - b * sn;
        z[h * hd + i + rot / 2] = b * c + a * sn;
      }
    }
    want.insert(want.end(), z.begin(), z.end());
  }
  expect_near(run(**sess, x, s), want, 1e-4);
  (*sess)->reset();
  expect_near(run(**sess, x, s, /*stepwise=*/true), want, 1e-4);
}

/// Rotation angle of dim 0/1 recovered from a rope of unit vectors at the last position.
std::vector<double> rope_freqs_at(const numerics::Rope& rp, int64_t s) {
  TestGraph t(rp.head_dim);
  ValueId r = *t.b.rope("rope", t.x, t.pos, rp, "");
  auto sess = t.session(r);
  std::vector<float> x(static_cast<size_t>(s * rp.head_dim), 0.0f);
  for (int64_t p = 0; p < s; ++p) {
    for (int64_t i = 0; i < rp.rotary_dim / 2; ++i)
      x[static_cast<size_t>(p * rp.head_dim + i)] = 1.0f;
  }
  const auto y = run(**sess, x, s);
  std::vector<double> f;
  const int64_t p = s - 1;
  for (int64_t i = 0; i < rp.rotary_dim / 2; ++i) {
    // (1, 0) rotates to (cos θ, sin θ); θ = p · f, small enough here not to wrap.
    f.push_back(std::atan2(y[p * rp.head_dim + i + rp.rotary_dim / 2], y[p * rp.head_dim + i]) /
                double(p));
  }
  return f;
}

TEST(EvaluatorTest, RopeLongInvFreqAndDynamicNtkSwitchOnLength) {
  numerics::Rope rp;
  rp.heads = 1;
  rp.head_dim = 4;
  rp.rotary_dim = 4;
  rp.inv_freq = {0.1, 0.01};
  rp.original_max_positions = 4;
  rp.long_inv_freq = {0.05, 0.002};
  auto f = rope_freqs_at(rp, 4);  // largest position + 1 = 4: not beyond the switch
  EXPECT_NEAR(f[0], 0.1, 1e-5);
  EXPECT_NEAR(f[1], 0.01, 1e-5);
  f = rope_freqs_at(rp, 6);
  EXPECT_NEAR(f[0], 0.05, 1e-5);
  EXPECT_NEAR(f[1], 0.002, 1e-5);

  rp.long_inv_freq.clear();
  rp.theta = 100.0;
  rp.inv_freq = {1.0, 0.1};
  rp.dynamic_factor = 2.0;
  f = rope_freqs_at(rp, 4);
  EXPECT_NEAR(f[1], 0.1, 1e-5);
  f = rope_freqs_at(rp, 8);
  const double base = 100.0 * std::pow(2.0 * 8 / 4 - 1.0, 4.0 / 2.0);
  EXPECT_NEAR(f[0], std::atan2(std::sin(7.0), std::cos(7.0)) / 7.0, 1e-5);  // f_0 = 1, wrapped
  EXPECT_NEAR(f[1], 1.0 / std::pow(base, 2.0 / 4.0), 1e-6);
}

TEST(EvaluatorTest, CacheOverflowIsResourceExhausted) {
  AttnGraph a(2, 1, 4, 0, 0.0, /*max_cache=*/4);
  auto s = a.t.session(a.out);
  QBC_ASSERT_OK(s);
  const auto x = randn(static_cast<size_t>(5 * a.t.hidden), 1);
  run(**s, std::vector<float>(x.begin(), x.begin() + 3 * a.t.hidden), 3);
  std::vector<float> out;
  const Status st =
      (*s)->forward_embeds(std::vector<float>(x.begin(), x.begin() + 2 * a.t.hidden), 2, &out);
  ASSERT_EQ(st.code(), Code::kResourceExhausted) << st.to_string();
  EXPECT_NE(st.message().find("blk.0.attn.sdpa"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("max_cache 4"), std::string::npos) << st.message();
  EXPECT_EQ((*s)->position(), 3);
  QBC_ASSERT_OK(
      (*s)->forward_embeds(std::vector<float>(x.begin(), x.begin() + a.t.hidden), 1, &out));
  EXPECT_EQ((*s)->position(), 4);
}

TEST(EvaluatorTest, BadTokenIdIsAnError) {
  TestGraph t(4, /*vocab=*/16);
  auto s = t.session(*t.b.scale("sc", t.x, 1.0, ""));
  QBC_ASSERT_OK(s);
  std::vector<float> out;
  for (int32_t bad : {16, -1}) {
    const Status st = (*s)->forward({1, bad}, &out);
    ASSERT_EQ(st.code(), Code::kInvalidArgument);
    EXPECT_NE(st.message().find("token id " + std::to_string(bad)), std::string::npos)
        << st.message();
    EXPECT_NE(st.message().find("vocab size 16"), std::string::npos) << st.message();
    EXPECT_EQ((*s)->embed({bad}, &out).code(), Code::kInvalidArgument);
  }
  EXPECT_EQ((*s)->position(), 0);
  // Valid ids embed with the host table.
  QBC_ASSERT_OK((*s)->forward({3, 5}, &out));
  std::vector<float> e;
  QBC_ASSERT_OK((*s)->embed({3, 5}, &e));
  EXPECT_EQ(out, e);
  const auto& table = t.data["token_embd.weight"];
  EXPECT_EQ(std::vector<float>(e.begin(), e.begin() + 4),
            std::vector<float>(table.begin() + 12, table.begin() + 16));
}

TEST(EvaluatorTest, WeightSizeMismatchNamesTheWeight) {
  TestGraph t(4);
  t.add_weight("norm.weight", {4}, {1, 1, 1});
  auto s = t.session(*t.b.rms_norm("norm", t.x, "norm.weight", 1e-5, false, 0, ""));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("norm.weight"), std::string::npos) << s.status().message();
}

TEST(EvaluatorTest, Float64ModeKeepsPrecision) {
  // (a + b) - a with a = 1e8, b = 1: 0 in float32, 1 in float64.
  TestGraph t(2);
  ValueId a = *t.b.slice("a", t.x, 0, 1, "");
  ValueId b = *t.b.slice("b", t.x, 1, 2, "");
  ValueId sum = *t.b.add("sum", a, b, "");
  ValueId neg = *t.b.scale("neg", a, -1.0, "");
  ValueId out = *t.b.add("out", sum, neg, "");
  const std::vector<float> x = {1e8f, 1.0f};
  auto s32 = t.session(out);
  QBC_ASSERT_OK(s32);
  EXPECT_EQ(run(**s32, x, 1), std::vector<float>{0.0f});
  SessionOptions o;
  o.float64 = true;
  o.threads = 1;
  auto s64 = t.session(out, o);
  QBC_ASSERT_OK(s64);
  EXPECT_EQ(run(**s64, x, 1), std::vector<float>{1.0f});
}

}  // namespace
}  // namespace qbc::ref
