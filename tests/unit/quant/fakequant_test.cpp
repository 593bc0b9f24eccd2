// Tests of the fake-quant evaluator (docs/numerics.md): bit-exact qlinear and quantized
// attention against hand-computed integers and an independent transcription of the spec,
// stories260K unquantized against the float reference runtime, and determinism
// (two sessions; prompt at once vs token by token) of a quantized stories260K.
#include "qbc/quant/fakequant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qbc/frontend/hparams.h"
#include "qbc/frontend/importer.h"
#include "qbc/frontend/model_source.h"
#include "qbc/frontend/model_weight_reader.h"
#include "qbc/ir/builder.h"
#include "qbc/ir/verifier.h"
#include "qbc/numerics/fp16.h"
#include "qbc/numerics/quantizer.h"
#include "qbc/ref/session.h"
#include "qbc/tensorfile/dtype.h"
#include "test_support.h"

namespace qbc::quant {
namespace {

using ir::DType;
using ir::TensorType;

/// fp16 rounding through tensorfile's converter (independent of round_fp16).
float h(float x) { return tensorfile::fp16_to_f32(tensorfile::f32_to_fp16(x)); }

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

using WeightMap = std::map<std::string, std::vector<float>>;

ir::WeightReader map_reader(const WeightMap& m, const ir::WeightReader& fallback = nullptr) {
  return [&m, fallback](const ir::Weight& w, std::vector<float>* out) -> Status {
    auto it = m.find(w.name);
    if (it != m.end()) {
      *out = it->second;
      return ok_status();
    }
    if (fallback) return fallback(w, out);
    return not_found("no test weight '", w.name, "'");
  };
}

/// Graph inputs and a host embedding table of `hidden` columns (4 rows, unused by nodes).
struct Tiny {
  ir::Graph g{"tiny"};
  ir::Builder b{g};
  WeightMap weights;
  ir::ValueId x = -1, positions = -1;
  explicit Tiny(int64_t hidden) {
    x = *b.input("inputs_embeds", TensorType{DType::kF32, {ir::kDynamic, ir::kDynamic, hidden}});
    positions = *b.input("positions", TensorType{DType::kI64, {ir::kDynamic, ir::kDynamic}});
    b.weight("token_embd.weight", TensorType{DType::kF32, {4, hidden}}, "tok",
             ir::WeightRole::kHostEmbedding);
    weights["token_embd.weight"].assign(static_cast<size_t>(4 * hidden), 0.0f);
  }
  void add_weight(const std::string& name, DType dt, std::vector<int64_t> dims,
                  std::vector<float> v) {
    b.weight(name, TensorType{dt, std::move(dims)}, name, ir::WeightRole::kParameter,
             ir::WeightSource::kSidecar);
    weights[name] = std::move(v);
  }
};

struct QLinearCase {
  std::vector<float> wq, wscale, bias;
  std::vector<float> wzero;  ///< Zero points shaped like wscale, or empty (symmetric).
  int64_t out = 0, in = 0;
  double in_scale = 1.0;
  int in_bits = 8, w_bits = 8;
  bool out_fp16 = true;
  bool in_dynamic = false;
  bool in_asym = false;
  int64_t in_zero = 0;  ///< static asymmetric inputs only
  int64_t w_group = 0;
};

StatusOr<std::unique_ptr<FakeQuantSession>> qlinear_session(const QLinearCase& c, Tiny& t) {
  t.add_weight("proj.wq", DType::kI8, {c.out, c.in}, c.wq);
  if (c.w_group > 0) {
    t.add_weight("proj.wscale", DType::kF32, {c.out, (c.in + c.w_group - 1) / c.w_group}, c.wscale);
  } else {
    t.add_weight("proj.wscale", DType::kF32, {c.out}, c.wscale);
  }
  std::vector<ir::Operand> ops = {ir::Operand::of(t.x), ir::Operand::of_weight("proj.wq"),
                                  ir::Operand::of_weight("proj.wscale")};
  if (!c.wzero.empty()) {
    const std::vector<int64_t> dims =
        c.w_group > 0 ? std::vector<int64_t>{c.out, (c.in + c.w_group - 1) / c.w_group}
                      : std::vector<int64_t>{c.out};
    t.add_weight("proj.wzero", DType::kI8, dims, c.wzero);
    ops.push_back(ir::Operand::of_weight("proj.wzero"));
  }
  if (!c.bias.empty()) {
    t.add_weight("proj.bias", DType::kF32, {c.out}, c.bias);
    ops.push_back(ir::Operand::of_weight("proj.bias"));
  }
  ir::Attrs a;
  a.set("in_scale", c.in_scale);
  a.set("in_bits", int64_t{c.in_bits});
  a.set("w_bits", int64_t{c.w_bits});
  a.set("out_fp16", int64_t{c.out_fp16 ? 1 : 0});
  if (c.in_dynamic) a.set("in_dynamic", int64_t{1});
  if (c.in_asym) a.set("in_asym", int64_t{1});
  if (c.in_asym && !c.in_dynamic) a.set("in_zero", c.in_zero);
  if (c.w_group > 0) a.set("w_group", c.w_group);
  if (!c.wzero.empty()) a.set("w_zero", int64_t{1});
  QBC_ASSIGN_OR_RETURN(ir::ValueId y, t.b.make(ir::Op::kQLinear, "proj", ops, a, "m.proj"));
  t.g.add_output(y);
  return FakeQuantSession::create(t.g, map_reader(t.weights));
}

/// Building c's session fails with kInvalidArgument, naming the node and saying `what`.
void expect_refused(const QLinearCase& c, const std::string& what) {
  Tiny t(c.in);
  auto s = qlinear_session(c, t);
  ASSERT_FALSE(s.ok()) << what;
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(::qbc::testing::contains(s.status().message(), "'proj'")) << s.status().message();
  EXPECT_TRUE(::qbc::testing::contains(s.status().message(), what)) << s.status().message();
}

std::vector<float> run_qlinear(const QLinearCase& c, const std::vector<float>& x, int64_t seq) {
  Tiny t(c.in);
  auto s = qlinear_session(c, t);
  std::vector<float> y;
  EXPECT_TRUE(s.ok() && (*s)->forward_embeds(x, seq, &y).ok()) << s.status().to_string();
  return y;
}

TEST(FakeQuantQLinear, HandAccumulatorsWithTiesAndClamping) {
  QLinearCase c;
  c.in = 5;
  c.out = 2;
  c.in_scale = 0.5;
  c.wq = {1, 1, 1, 1, 1, 3, -2, 5, 1, 0};
  c.wscale = {2.0f, 2.0f};  // M = 1: the outputs are the accumulators
  // x / 0.5: token 0 -> [2.5, 3.5, -2.5, 200, -200] -> [2, 4, -2, 127, -128];
  //          token 1 -> [1.5, -1.5, 0.5, -0.5, 127.5] -> [2, -2, 0, 0, 127].
  const std::vector<float> x = {1.25f, 1.75f,  -1.25f, 100.0f, -100.0f,
                                0.75f, -0.75f, 0.25f,  -0.25f, 63.75f};
  const std::vector<float> y = run_qlinear(c, x, 2);
  // acc0 = 2+4-2+127-128 = 3; acc1 = 6-8-10+127 = 115; acc2 = 2-2+127 = 127; acc3 = 6+4 = 10.
  EXPECT_EQ(y, (std::vector<float>{3.0f, 115.0f, 127.0f, 10.0f}));
}

TEST(FakeQuantQLinear, BiasAndOutputRoundingFollowTheRequantRule) {
  QLinearCase c;
  c.in = 3;
  c.out = 2;
  c.in_scale = 0.1f;  // an fp32 scale stored as a double attribute
  c.wq = {7, -3, 2, -128, 127, 5};
  c.wscale = {0.3f, 0.07f};
  c.bias = {0.1f, -1.5f};
  const std::vector<float> x = {1.0f, -0.5f, 2.0f};  // codes [10, -5, 20]
  const int64_t acc[2] = {70 + 15 + 40, -1280 - 635 + 100};
  std::vector<float> want16, want32;
  for (int ch = 0; ch < 2; ++ch) {
    volatile float m = 0.1f * c.wscale[static_cast<size_t>(ch)];
    volatile float p = static_cast<float>(acc[ch]) * m;
    volatile float v = p + c.bias[static_cast<size_t>(ch)];
    want32.push_back(static_cast<float>(v));
    want16.push_back(h(v));
  }
  EXPECT_EQ(run_qlinear(c, x, 1), want16);
  c.out_fp16 = false;
  const std::vector<float> y32 = run_qlinear(c, x, 1);
  EXPECT_EQ(y32, want32);
  EXPECT_NE(y32, want16);  // the head path really skips the fp16 rounding
}

TEST(FakeQuantQLinear, SixteenBitInputsAndFp16OutputRounding) {
  QLinearCase c;
  c.in = 4;
  c.out = 2;
  c.in_scale = 0.5;
  c.in_bits = 16;
  c.wq = {1, 1, 1, 1, 2, -1, 1, 0};
  c.wscale = {2.0f, 2.0f};
  const std::vector<float> x = {20000.0f, 100.0f, -20000.0f, 1.25f};
  // 16 bits: codes [32767, 200, -32768, 2]: acc 201 and 65534-200-32768 = 32566, which
  // fp16 rounds to 32560 (spacing 16).
  EXPECT_EQ(run_qlinear(c, x, 1), (std::vector<float>{201.0f, 32560.0f}));
  c.in_bits = 8;  // codes [127, 127, -128, 2]: 128 and 254-127-128 = -1
  EXPECT_EQ(run_qlinear(c, x, 1), (std::vector<float>{128.0f, -1.0f}));
}

TEST(FakeQuantQLinear, PerTokenDynamicScaleIsTheRowMaxOverQmax) {
  QLinearCase c;
  c.in = 3;
  c.out = 2;
  c.in_scale = 1000.0;  // the recorded static scale: ignored when in_dynamic
  c.in_dynamic = true;
  c.wq = {1, 2, 3, -4, 0, 7};
  c.wscale = {0.5f, 0.25f};
  c.out_fp16 = false;
  // Rows with very different ranges: a static scale could not serve both.
  // fp16 values: the NPU input buffer is fp16.
  const std::vector<float> x = {h(0.1f), h(-0.2f), h(0.05f), 300.0f, 12.5f, -7.0f};
  std::vector<float> want;
  for (int t = 0; t < 2; ++t) {
    const float* xr = x.data() + 3 * t;
    const double m = std::max({std::fabs(xr[0]), std::fabs(xr[1]), std::fabs(xr[2])});
    const float s = static_cast<float>(m / 127.0);
    int64_t q[3];
    for (int i = 0; i < 3; ++i)
      q[i] = static_cast<int64_t>(std::nearbyint(xr[i] / static_cast<double>(s)));
    EXPECT_EQ(std::max({std::llabs(q[0]), std::llabs(q[1]), std::llabs(q[2])}), 127);
    for (int ch = 0; ch < 2; ++ch) {
      int64_t acc = 0;
      for (int i = 0; i < 3; ++i)
        acc += q[i] * static_cast<int64_t>(c.wq[static_cast<size_t>(ch * 3 + i)]);
      volatile float mult = s * c.wscale[static_cast<size_t>(ch)];
      volatile float v = static_cast<float>(acc) * mult;
      want.push_back(static_cast<float>(v));
    }
  }
  EXPECT_EQ(run_qlinear(c, x, 2), want);
  // Prefill and token-by-token agree: the scale depends on the row only.
  Tiny t(c.in);
  auto s = qlinear_session(c, t);
  QBC_ASSERT_OK(s);
  std::vector<float> y0, y1;
  QBC_ASSERT_OK((*s)->forward_embeds({x.begin(), x.begin() + 3}, 1, &y0));
  QBC_ASSERT_OK((*s)->forward_embeds({x.begin() + 3, x.end()}, 1, &y1));
  y0.insert(y0.end(), y1.begin(), y1.end());
  EXPECT_TRUE(bitwise_equal(y0, want));
  // An all-zero row quantizes to zeros instead of dividing by zero.
  EXPECT_EQ(run_qlinear(c, {0.0f, 0.0f, 0.0f}, 1), (std::vector<float>{0.0f, 0.0f}));
}

// Asymmetric inputs (calibration.method 2 / 3): per token, [lo, hi] = [min(min x, 0),
// max(max x, 0)], s = (hi − lo) / 255, z = rne(−lo / s) − 128, and the accumulator is
// Σ (q_x − z)·q_w; statically, the node's in_scale and in_zero.
TEST(FakeQuantQLinear, AsymmetricInputsPerTokenAndStatic) {
  QLinearCase c;
  c.in = 3;
  c.out = 2;
  c.in_scale = 1000.0;
  c.in_dynamic = true;
  c.in_asym = true;
  c.wq = {1, 2, 3, -4, 0, 7};
  c.wscale = {0.5f, 0.25f};
  c.out_fp16 = false;
  const std::vector<float> x = {h(0.5f), h(2.0f), h(1.25f), h(-3.0f), h(-1.0f), h(-0.5f)};
  std::vector<float> want;
  for (int t = 0; t < 2; ++t) {
    const float* xr = x.data() + 3 * t;
    const double lo = std::min({0.0f, xr[0], xr[1], xr[2]}),
                 hi = std::max({0.0f, xr[0], xr[1], xr[2]});
    const float s = static_cast<float>((hi - lo) / 255.0);
    const int64_t z = static_cast<int64_t>(std::nearbyint(-lo / s)) - 128;
    EXPECT_EQ(z, t == 0 ? -128
                        : 127);  // an all-positive row uses the whole range upwards, and vice versa
    int64_t q[3];
    for (int i = 0; i < 3; ++i) {
      q[i] = std::clamp<int64_t>(
          static_cast<int64_t>(std::nearbyint(xr[i] / static_cast<double>(s))) + z, -128, 127);
    }
    for (int ch = 0; ch < 2; ++ch) {
      int64_t acc = 0;
      for (int i = 0; i < 3; ++i)
        acc += (q[i] - z) * static_cast<int64_t>(c.wq[static_cast<size_t>(ch * 3 + i)]);
      volatile float mult = s * c.wscale[static_cast<size_t>(ch)];
      volatile float v = static_cast<float>(acc) * mult;
      want.push_back(static_cast<float>(v));
    }
  }
  EXPECT_EQ(run_qlinear(c, x, 2), want);
  // Static: the calibrated scale and zero point from the node.
  c.in_dynamic = false;
  c.in_scale = 0.02;
  c.in_zero = -28;
  const std::vector<float> xs = {1.0f, -0.5f, 3.0f};  // codes rne(x / 0.02) - 28 = [22, -53, 122]
  const int64_t qs[3] = {22, -53, 122};
  std::vector<float> want_s;
  for (int ch = 0; ch < 2; ++ch) {
    int64_t acc = 0;
    for (int i = 0; i < 3; ++i)
      acc += (qs[i] + 28) * static_cast<int64_t>(c.wq[static_cast<size_t>(ch * 3 + i)]);
    volatile float mult = 0.02f * c.wscale[static_cast<size_t>(ch)];
    volatile float v = static_cast<float>(acc) * mult;
    want_s.push_back(static_cast<float>(v));
  }
  EXPECT_EQ(run_qlinear(c, xs, 1), want_s);
  // A static asymmetric input without a zero point in range is refused by the verifier.
  c.in_zero = 128;
  Tiny t(c.in);
  auto bad = qlinear_session(c, t);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(::qbc::testing::contains(bad.status().message(), "in_zero"))
      << bad.status().message();
}

TEST(FakeQuantQLinear, GroupScalesRequantizeEachPartialSumInGroupOrder) {
  QLinearCase c;
  c.in = 5;  // groups of 2: [0, 2), [2, 4), [4, 5) (the last one shorter)
  c.out = 2;
  c.w_group = 2;
  c.in_scale = 0.5;
  c.out_fp16 = false;
  c.wq = {1, 2, 3, 4, 5, -1, -2, -3, -4, 7};
  c.wscale = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};               // [out, 3]
  const std::vector<float> x = {1.0f, -2.0f, 0.5f, 1.5f, 3.0f};  // codes [2, -4, 1, 3, 6]
  const int64_t codes[5] = {2, -4, 1, 3, 6};
  std::vector<float> want;
  for (int ch = 0; ch < 2; ++ch) {
    float v = 0;
    for (int g = 0; g < 3; ++g) {
      int64_t acc = 0;
      for (int i = 2 * g; i < std::min(5, 2 * g + 2); ++i)
        acc += codes[i] * static_cast<int64_t>(c.wq[ch * 5 + i]);
      volatile float m = 0.5f * c.wscale[static_cast<size_t>(ch * 3 + g)];
      volatile float part = static_cast<float>(acc) * m;
      volatile float sum = g == 0 ? part : v + part;
      v = sum;
    }
    want.push_back(v);
  }
  EXPECT_EQ(run_qlinear(c, x, 1), want);
  // A wrongly shaped scale tensor is refused by the verifier.
  c.wscale.resize(4);
  Tiny t(c.in);
  t.add_weight("proj.wq", DType::kI8, {c.out, c.in}, c.wq);
  t.add_weight("proj.wscale", DType::kF32, {c.out, 2}, c.wscale);
  ir::Attrs a;
  a.set("in_scale", 0.5);
  a.set("in_bits", int64_t{8});
  a.set("w_bits", int64_t{8});
  a.set("out_fp16", int64_t{0});
  a.set("w_group", int64_t{2});
  auto y = t.b.make(ir::Op::kQLinear, "proj",
                    {ir::Operand::of(t.x), ir::Operand::of_weight("proj.wq"),
                     ir::Operand::of_weight("proj.wscale")},
                    a, "m.proj");
  ASSERT_FALSE(y.ok());
  EXPECT_TRUE(::qbc::testing::contains(y.status().message(), "must be f32[2,3] for w_group 2"))
      << y.status().message();
}

// Zero points (numerics.md): each group's accumulator is Σ q_x·q_w − z·Σ q_x, which
// equals Σ q_x·(q_w − z) exactly; the bias follows the zero-point operand.
TEST(FakeQuantQLinear, ZeroPointsSubtractTheGroupCodeSum) {
  QLinearCase c;
  c.in = 5;  // groups [0, 2), [2, 4), [4, 5)
  c.out = 2;
  c.w_group = 2;
  c.w_bits = 4;
  c.in_scale = 0.5;
  c.out_fp16 = false;
  c.wq = {-8, 7, 3, 0, 5, -1, -2, -3, -4, 7};
  c.wscale = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  c.wzero = {-8, 3, 0, 7, -1, -5};
  c.bias = {0.25f, -1.0f};
  const std::vector<float> x = {1.0f, -2.0f, 0.5f, 1.5f, 3.0f};  // codes [2, -4, 1, 3, 6]
  const int64_t codes[5] = {2, -4, 1, 3, 6};
  std::vector<float> want;
  for (int ch = 0; ch < 2; ++ch) {
    float v = 0;
    for (int g = 0; g < 3; ++g) {
      int64_t acc = 0;  // the definition: codes against (q_w - z)
      for (int i = 2 * g; i < std::min(5, 2 * g + 2); ++i) {
        acc += codes[i] *
               (static_cast<int64_t>(c.wq[ch * 5 + i]) - static_cast<int64_t>(c.wzero[ch * 3 + g]));
      }
      volatile float m = 0.5f * c.wscale[static_cast<size_t>(ch * 3 + g)];
      volatile float part = static_cast<float>(acc) * m;
      volatile float sum = g == 0 ? part : v + part;
      v = sum;
    }
    volatile float b = v + c.bias[static_cast<size_t>(ch)];
    want.push_back(static_cast<float>(b));
  }
  const std::vector<float> y = run_qlinear(c, x, 1);
  EXPECT_EQ(y, want);
  QLinearCase sym = c;
  sym.wzero.clear();
  EXPECT_NE(run_qlinear(sym, x, 1), want);  // the zero points really enter
  // A zero point outside the 4-bit code range is refused, naming the node.
  c.wzero[4] = 8;
  expect_refused(c, "zero point");
  // A zero-point tensor not shaped like the scales is refused by the verifier.
  Tiny t2(c.in);
  t2.add_weight("proj.wq", DType::kI8, {c.out, c.in}, c.wq);
  t2.add_weight("proj.wscale", DType::kF32, {c.out, 3}, c.wscale);
  t2.add_weight("proj.wzero", DType::kI8, {c.out}, {0.0f, 0.0f});
  ir::Attrs a;
  a.set("in_scale", 0.5);
  a.set("in_bits", int64_t{8});
  a.set("w_bits", int64_t{4});
  a.set("out_fp16", int64_t{0});
  a.set("w_group", int64_t{2});
  a.set("w_zero", int64_t{1});
  auto y2 = t2.b.make(ir::Op::kQLinear, "proj",
                      {ir::Operand::of(t2.x), ir::Operand::of_weight("proj.wq"),
                       ir::Operand::of_weight("proj.wscale"), ir::Operand::of_weight("proj.wzero")},
                      a, "m.proj");
  ASSERT_FALSE(y2.ok());
  EXPECT_TRUE(::qbc::testing::contains(y2.status().message(), "shaped like the scale"))
      << y2.status().message();
}

TEST(FakeQuantQLinear, FourBitWeightsUseMinusEightToSeven) {
  QLinearCase c;
  c.in = 2;
  c.out = 1;
  c.in_scale = 1.0;
  c.w_bits = 4;
  c.wq = {-8, 7};
  c.wscale = {1.0f};
  EXPECT_EQ(run_qlinear(c, {3.0f, 5.0f}, 1), (std::vector<float>{-24.0f + 35.0f}));
  for (auto [bits, bad] : {std::pair{4, 8.0f}, {4, -9.0f}, {4, 1.5f}, {8, 128.0f}}) {
    c.w_bits = bits;
    c.wq = {bad, 0.0f};
    expect_refused(c, "not an integer in");
  }
}

// A negative weight scale (the long-end rule of numerics.md, a positive extreme on
// code -8) multiplies like any other; a zero or non-finite one is refused.
TEST(FakeQuantQLinear, NegativeWeightScalesAreTheLongEndRule) {
  QLinearCase c;
  c.in = 2;
  c.out = 1;
  c.in_scale = 1.0;
  c.w_bits = 4;
  c.wq = {-8, 3};
  c.wscale = {-0.25f};  // the weights 2.0 and -0.75
  c.out_fp16 = false;
  EXPECT_EQ(run_qlinear(c, {3.0f, 5.0f}, 1), (std::vector<float>{(-24.0f + 15.0f) * -0.25f}));
  for (float bad : {0.0f, 1e-9f, -std::numeric_limits<float>::infinity()}) {
    c.wscale = {bad};
    expect_refused(c, "|s| >= 1e-8");
  }
}

/// q, k, v sliced out of one input row; attention "attn" is the output.
struct AttnCase {
  int64_t heads = 4, kv = 2, d = 4, window = 0, max_cache = 16;
  int p_bits = 8;
  double scale = 0.5;
  bool q_dynamic = false;
  std::vector<float> q_scale, k_scale, v_scale;
  std::vector<float> k_offset, v_offset;  // empty: attributes absent
  AttnCase() {
    for (int64_t c = 0; c < kv * d; ++c) {
      const int64_t pair = c % d % (d / 2);  // channels i and i + d/2 share a scale
      k_scale.push_back(2.0f / 127.0f * (1.0f + 0.25f * static_cast<float>(pair + c / d)));
      v_scale.push_back(2.0f / 127.0f * (1.0f + 0.125f * static_cast<float>(c)));
    }
    for (int64_t i = 0; i < heads; ++i) q_scale.push_back(0.06f / 127.0f * (1.0f + 0.1f * i));
  }
  int64_t width() const { return (heads + 2 * kv) * d; }
};

StatusOr<std::unique_ptr<FakeQuantSession>> attention_session(const AttnCase& c, bool quant) {
  Tiny t(c.width());
  const int64_t qw = c.heads * c.d, kw = c.kv * c.d;
  QBC_ASSIGN_OR_RETURN(ir::ValueId q, t.b.slice("q", t.x, 0, qw, "m.q"));
  QBC_ASSIGN_OR_RETURN(ir::ValueId k, t.b.slice("k", t.x, qw, qw + kw, "m.k"));
  QBC_ASSIGN_OR_RETURN(ir::ValueId v, t.b.slice("v", t.x, qw + kw, qw + 2 * kw, "m.v"));
  const ir::AttentionParams ap{c.heads, c.kv, c.d, c.scale, 0.0, c.window, c.max_cache};
  QBC_ASSIGN_OR_RETURN(ir::ValueId y, t.b.attention("attn", q, k, v, ap, "m.attn"));
  if (quant) {  // the builder makes float attention; the quantized attributes go on top
    ir::Attrs& a = t.g.mutable_node(y).attrs;
    a.set("k_bits", int64_t{8});
    a.set("v_bits", int64_t{8});
    a.set("p_bits", int64_t{c.p_bits});
    a.set("q_scale", std::vector<double>(c.q_scale.begin(), c.q_scale.end()));
    a.set("k_scale", std::vector<double>(c.k_scale.begin(), c.k_scale.end()));
    a.set("v_scale", std::vector<double>(c.v_scale.begin(), c.v_scale.end()));
    if (!c.k_offset.empty())
      a.set("k_offset", std::vector<double>(c.k_offset.begin(), c.k_offset.end()));
    if (!c.v_offset.empty())
      a.set("v_offset", std::vector<double>(c.v_offset.begin(), c.v_offset.end()));
    if (c.q_dynamic) a.set("q_dynamic", int64_t{1});
  }
  t.g.add_output(y);
  return FakeQuantSession::create(t.g, map_reader(t.weights));
}

std::vector<float> attention_inputs(const AttnCase& c, int64_t seq) {
  std::vector<float> x;
  uint32_t state = 99;
  for (int64_t i = 0; i < seq * c.width(); ++i) {
    state = state * 1664525u + 1013904223u;
    x.push_back(h(static_cast<float>(state >> 8) / 16777216.0f * 4.0f - 2.0f));
  }
  return x;
}

/// The quantized attention rules of docs/numerics.md, transcribed independently.
std::vector<float> spec_attention(const AttnCase& c, const std::vector<float>& x, int64_t seq) {
  const int64_t d = c.d, w = c.width(), qw = c.heads * d, kw = c.kv * d;
  auto code = [](double v, float s, double lo, double hi, float offset = 0.0f) {
    return std::min(hi, std::max(lo, std::nearbyint((v - static_cast<double>(offset)) /
                                                    static_cast<double>(s))));
  };
  auto offset = [](const std::vector<float>& o, size_t i) { return o.empty() ? 0.0f : o[i]; };
  std::vector<float> y(static_cast<size_t>(seq * qw));
  for (int64_t p = 0; p < seq; ++p) {
    for (int64_t hq = 0; hq < c.heads; ++hq) {
      const int64_t g = hq / (c.heads / c.kv);
      std::vector<double> qq(static_cast<size_t>(d));
      std::vector<float> qs(static_cast<size_t>(d));
      double qmax_abs = 0;
      for (int64_t i = 0; i < d; ++i) {
        const float sk = c.k_scale[static_cast<size_t>(g * d + i)];
        qs[static_cast<size_t>(i)] = h(x[p * w + hq * d + i] * sk);
        qmax_abs = std::max(qmax_abs, std::fabs(static_cast<double>(qs[static_cast<size_t>(i)])));
      }
      const float sq = c.q_dynamic ? static_cast<float>(qmax_abs / 127.0) : c.q_scale[hq];
      for (int64_t i = 0; i < d; ++i)
        qq[static_cast<size_t>(i)] = code(qs[static_cast<size_t>(i)], sq, -128, 127);
      std::vector<float> sc;
      std::vector<int64_t> js;
      for (int64_t j = 0; j < seq; ++j) {
        if (j > p || (c.window > 0 && p - j >= c.window)) continue;
        double acc = 0;
        for (int64_t i = 0; i < d; ++i) {
          const size_t kc = static_cast<size_t>(g * d + i);
          acc += qq[static_cast<size_t>(i)] *
                 code(x[j * w + qw + g * d + i], c.k_scale[kc], -128, 127, offset(c.k_offset, kc));
        }
        sc.push_back(static_cast<float>(acc) *
                     static_cast<float>(static_cast<double>(sq) * c.scale));
        js.push_back(j);
      }
      // Tile-invariant softmax: exponent codes against the exact max, integer sums, one
      // normalisation in fp64.
      const float m = *std::max_element(sc.begin(), sc.end());
      const double top = (1 << c.p_bits) - 1;
      std::vector<double> e;
      double esum = 0;
      for (float v : sc) {
        e.push_back(std::min(top, std::nearbyint(std::exp(static_cast<double>(v - m)) * top)));
        esum += e.back();
      }
      for (int64_t i = 0; i < d; ++i) {
        const size_t vc = static_cast<size_t>(g * d + i);
        double acc = 0;
        for (size_t n = 0; n < js.size(); ++n) {
          acc += e[n] * code(x[js[n] * w + qw + kw + g * d + i], c.v_scale[vc], -128, 127,
                             offset(c.v_offset, vc));
        }
        y[static_cast<size_t>(p * qw + hq * d + i)] =
            numerics::round_fp16(acc / esum * static_cast<double>(c.v_scale[vc]) +
                                 offset(c.v_offset, vc));  // fp64 straight to fp16
      }
    }
  }
  return y;
}

/// q, k = rope(k_pre), v from one input row; the keys' first rotary pair sits around a
/// large centre (a low-frequency pair of a real model). Quantized with `k_scale` (and
/// the rotating offsets `rot` when not empty), or float when `quant` is false.
StatusOr<std::unique_ptr<FakeQuantSession>> rotary_attention_session(
    bool quant, const std::vector<double>& k_scale, const std::vector<double>& rot) {
  const int64_t heads = 2, kv = 1, d = 4, width = (heads + 2 * kv) * d;
  Tiny t(width);
  QBC_ASSIGN_OR_RETURN(ir::ValueId q, t.b.slice("q", t.x, 0, heads * d, "m.q"));
  QBC_ASSIGN_OR_RETURN(ir::ValueId kp, t.b.slice("k_pre", t.x, heads * d, (heads + kv) * d, "m.k"));
  QBC_ASSIGN_OR_RETURN(ir::ValueId v, t.b.slice("v", t.x, (heads + kv) * d, width, "m.v"));
  numerics::Rope rp;
  rp.heads = kv;
  rp.head_dim = d;
  rp.rotary_dim = d;
  rp.inv_freq = {0.5, 0.02};
  QBC_ASSIGN_OR_RETURN(ir::ValueId k, t.b.rope("k", kp, t.positions, rp, "m.rope"));
  const ir::AttentionParams ap{heads, kv, d, 0.5, 0.0, 0, 64};
  QBC_ASSIGN_OR_RETURN(ir::ValueId y, t.b.attention("attn", q, k, v, ap, "m.attn"));
  if (quant) {
    ir::Attrs& a = t.g.mutable_node(y).attrs;
    a.set("k_bits", int64_t{8});
    a.set("v_bits", int64_t{8});
    a.set("p_bits", int64_t{8});
    a.set("q_scale", std::vector<double>{0.05, 0.05});
    a.set("q_dynamic", int64_t{1});
    a.set("k_scale", k_scale);
    a.set("v_scale", std::vector<double>(4, 2.0 / 127));
    if (!rot.empty()) a.set("k_rot_offset", rot);
  }
  t.g.add_output(y);
  return FakeQuantSession::create(t.g, map_reader(t.weights));
}

// Rotating key offsets: storing k − rope(m) and adding q·rope(m) to the score is exact
// up to rounding, so a scale that covers only the spread around m (not the circle |m|
// sweeps) is much closer to float attention; prefill and token by token agree, and the
// offset rides with K's rope (refused without one).
TEST(FakeQuantAttention, RotatingKeyOffsetsFollowTheRotation) {
  const int64_t seq = 40, width = 16;
  std::vector<float> x(static_cast<size_t>(seq * width));
  uint32_t state = 7;
  for (int64_t t = 0; t < seq; ++t) {
    for (int64_t i = 0; i < width; ++i) {
      state = state * 1664525u + 1013904223u;
      float r = static_cast<float>(state >> 8) / 16777216.0f * 2.0f - 1.0f;
      if (i == 8) r = 20.0f + r;  // k_pre channel 0 (pair 0 with channel 2) around 20
      if (i == 10) r = -6.0f + r;
      x[static_cast<size_t>(t * width + i)] = h(r);
    }
  }
  auto run = [&](bool quant, const std::vector<double>& ks, const std::vector<double>& rot,
                 int64_t chunk) {
    auto s = rotary_attention_session(quant, ks, rot);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    std::vector<float> y, part;
    for (int64_t t0 = 0; t0 < seq; t0 += chunk) {
      EXPECT_TRUE((*s)->forward_embeds({x.begin() + t0 * width, x.begin() + (t0 + chunk) * width},
                                       chunk, &part)
                      .ok());
      y.insert(y.end(), part.begin(), part.end());
    }
    return y;
  };
  const std::vector<float> ref = run(false, {}, {}, seq);
  // Without offsets the pair's scale must cover radius |(20, -6)| + 1.5; with them, the spread
  // (~1.5).
  const double wide = 22.5 / 127, narrow = 1.6 / 127;
  const std::vector<float> plain = run(true, {wide, 1.2 / 127, wide, 1.2 / 127}, {}, seq);
  const std::vector<double> rot = {20.0, 0.0, -6.0, 0.0};
  const std::vector<float> moved = run(true, {narrow, 1.2 / 127, narrow, 1.2 / 127}, rot, seq);
  auto err = [&](const std::vector<float>& y) {
    double e = 0;
    for (size_t i = 0; i < y.size(); ++i) e += (y[i] - ref[i]) * (y[i] - ref[i]);
    return e;
  };
  std::printf("rotating key offsets: squared error %.3g without, %.3g with\n", err(plain),
              err(moved));
  EXPECT_GT(err(plain), 0.0);
  EXPECT_LT(err(moved), 0.5 * err(plain));  // Q, P and V rounding are common to both
  EXPECT_TRUE(bitwise_equal(moved, run(true, {narrow, 1.2 / 127, narrow, 1.2 / 127}, rot, 1)));
  // Without a rope in front of K the offsets cannot rotate: the verifier refuses them.
  AttnCase c;
  c.k_offset.clear();
  Tiny t(c.width());
  auto q = *t.b.slice("q", t.x, 0, c.heads * c.d, "m.q");
  auto k = *t.b.slice("k", t.x, c.heads * c.d, (c.heads + c.kv) * c.d, "m.k");
  auto y = *t.b.attention("attn", q, k, k, ir::AttentionParams{c.heads, c.kv, c.d, 0.5, 0.0, 0, 16},
                          "m.attn");
  ir::Attrs& a = t.g.mutable_node(y).attrs;
  a.set("k_bits", int64_t{8});
  a.set("v_bits", int64_t{8});
  a.set("p_bits", int64_t{8});
  a.set("q_scale", std::vector<double>(static_cast<size_t>(c.heads), 0.01));
  a.set("k_scale", std::vector<double>(static_cast<size_t>(c.kv * c.d), 0.01));
  a.set("v_scale", std::vector<double>(static_cast<size_t>(c.kv * c.d), 0.01));
  a.set("k_rot_offset", std::vector<double>(static_cast<size_t>(c.kv * c.d), 1.0));
  Status st = ir::verify(t.g);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(::qbc::testing::contains(st.message(), "k_rot_offset needs K from a rope node"))
      << st.message();
}

TEST(FakeQuantAttention, MatchesSpecBitExactlyWithGqaWindowAndIntegerCache) {
  for (int p_bits : {8, 16}) {
    for (int64_t window : {int64_t{0}, int64_t{3}}) {
      AttnCase c;
      c.p_bits = p_bits;
      c.window = window;
      const int64_t seq = 7;
      const std::vector<float> x = attention_inputs(c, seq);
      auto s = attention_session(c, true);
      QBC_ASSERT_OK(s);
      std::vector<float> y;
      QBC_ASSERT_OK((*s)->forward_embeds(x, seq, &y));
      EXPECT_TRUE(bitwise_equal(y, spec_attention(c, x, seq))) << p_bits << " " << window;
      KvCacheSnapshot kv;
      QBC_ASSERT_OK((*s)->kv_cache("attn", &kv));
      ASSERT_TRUE(kv.quantized);
      ASSERT_EQ(kv.tokens, seq);
      ASSERT_EQ(kv.k_codes.size(), static_cast<size_t>(seq * c.kv * c.d));
      EXPECT_TRUE(kv.k_values.empty());
      const int64_t qw = c.heads * c.d, kw = c.kv * c.d;
      for (int64_t t = 0; t < seq; ++t) {
        for (int64_t ch = 0; ch < kw; ++ch) {
          const size_t i = static_cast<size_t>(t * kw + ch);
          const float k = x[t * c.width() + qw + ch], v = x[t * c.width() + qw + kw + ch];
          EXPECT_EQ(kv.k_codes[i], std::nearbyint(k / static_cast<double>(c.k_scale[ch])));
          EXPECT_EQ(kv.v_codes[i], std::nearbyint(v / static_cast<double>(c.v_scale[ch])));
        }
      }
      // Token by token gives the same bits (static scales, per-query computation).
      (*s)->reset();
      std::vector<float> stepwise, one;
      for (int64_t t = 0; t < seq; ++t) {
        std::vector<float> xt(x.begin() + t * c.width(), x.begin() + (t + 1) * c.width());
        QBC_ASSERT_OK((*s)->forward_embeds(xt, 1, &one));
        stepwise.insert(stepwise.end(), one.begin(), one.end());
      }
      EXPECT_TRUE(bitwise_equal(stepwise, y));
    }
  }
}

TEST(FakeQuantAttention, OffsetsAndDynamicQMatchTheSpec) {
  AttnCase c;
  const int64_t seq = 6;
  std::vector<float> x = attention_inputs(c, seq);
  const int64_t qw = c.heads * c.d, kw = c.kv * c.d;
  // Give K and V a large constant per-channel offset (the low-frequency rotary channels
  // of real keys look like this), scales sized for the centred range.
  for (int64_t ch = 0; ch < kw; ++ch) {
    c.k_offset.push_back(6.0f + static_cast<float>(ch));
    c.v_offset.push_back(-3.0f + 0.5f * static_cast<float>(ch));
    for (int64_t t = 0; t < seq; ++t) {
      x[t * c.width() + qw + ch] = h(x[t * c.width() + qw + ch] + c.k_offset.back());
      x[t * c.width() + qw + kw + ch] = h(x[t * c.width() + qw + kw + ch] + c.v_offset.back());
    }
  }
  for (bool dyn : {false, true}) {
    c.q_dynamic = dyn;
    auto s = attention_session(c, true);
    QBC_ASSERT_OK(s);
    std::vector<float> y;
    QBC_ASSERT_OK((*s)->forward_embeds(x, seq, &y));
    EXPECT_TRUE(bitwise_equal(y, spec_attention(c, x, seq))) << "q_dynamic " << dyn;
  }
  // The K offset is softmax-invariant and the V offset is added back, so the quantized
  // result tracks the float attention; without offsets the codes clamp and it does not.
  auto sf = attention_session(c, false);
  QBC_ASSERT_OK(sf);
  std::vector<float> yf, yo, yn;
  QBC_ASSERT_OK((*sf)->forward_embeds(x, seq, &yf));
  auto so = attention_session(c, true);
  QBC_ASSERT_OK(so);
  QBC_ASSERT_OK((*so)->forward_embeds(x, seq, &yo));
  c.k_offset.clear();
  c.v_offset.clear();
  auto sn = attention_session(c, true);
  QBC_ASSERT_OK(sn);
  QBC_ASSERT_OK((*sn)->forward_embeds(x, seq, &yn));
  double err_offset = 0, err_none = 0;
  for (size_t i = 0; i < yf.size(); ++i) {
    err_offset = std::max(err_offset, std::fabs(static_cast<double>(yo[i]) - yf[i]));
    err_none = std::max(err_none, std::fabs(static_cast<double>(yn[i]) - yf[i]));
  }
  std::printf("[fakequant] offset attention max|q - float|: with offsets %.4g, without %.4g\n",
              err_offset, err_none);
  EXPECT_LT(err_offset, 0.1);
  EXPECT_GT(err_none, 4 * err_offset);
}

TEST(FakeQuantAttention, ProbabilityBitsChangeTheResultAndFloatPathIsClose) {
  AttnCase c;
  const int64_t seq = 9;
  const std::vector<float> x = attention_inputs(c, seq);
  std::vector<float> y8, y16, yf;
  for (auto [p_bits, y] : {std::pair{8, &y8}, std::pair{16, &y16}}) {
    c.p_bits = p_bits;
    auto s = attention_session(c, true);
    QBC_ASSERT_OK(s);
    QBC_ASSERT_OK((*s)->forward_embeds(x, seq, y));
  }
  auto sf = attention_session(c, false);
  QBC_ASSERT_OK(sf);
  QBC_ASSERT_OK((*sf)->forward_embeds(x, seq, &yf));
  double d8 = 0, d16 = 0;
  for (size_t i = 0; i < yf.size(); ++i) {
    d8 = std::max(d8, std::fabs(static_cast<double>(y8[i]) - yf[i]));
    d16 = std::max(d16, std::fabs(static_cast<double>(y16[i]) - yf[i]));
  }
  std::printf("[fakequant] tiny attention max|q - float|: p8 %.4g, p16 %.4g\n", d8, d16);
  EXPECT_NE(y8, y16);
  EXPECT_LT(std::max(d8, d16), 0.1);
  KvCacheSnapshot kv;
  QBC_ASSERT_OK((*sf)->kv_cache("attn", &kv));
  EXPECT_FALSE(kv.quantized);
  EXPECT_EQ(kv.k_values.size(), static_cast<size_t>(seq * c.kv * c.d));
}

TEST(FakeQuantAttention, CacheOverflowIsResourceExhaustedNamingTheNode) {
  AttnCase c;
  c.max_cache = 4;
  auto s = attention_session(c, true);
  QBC_ASSERT_OK(s);
  std::vector<float> y;
  QBC_ASSERT_OK((*s)->forward_embeds(attention_inputs(c, 3), 3, &y));
  const Status st = (*s)->forward_embeds(attention_inputs(c, 2), 2, &y);
  EXPECT_EQ(st.code(), Code::kResourceExhausted);
  EXPECT_TRUE(::qbc::testing::contains(st.message(), "'attn'")) << st.message();
  EXPECT_EQ((*s)->position(), 3);
}

// ---- stories260K --------------------------------------------------------------------------

struct Model {
  std::unique_ptr<frontend::ModelSource> source;
  ir::Graph graph;
  std::vector<int32_t> medium, calib;  // golden ids: medium_64, long_200
};

StatusOr<Model> load_stories(const std::filesystem::path& dir) {
  Model m;
  QBC_ASSIGN_OR_RETURN(frontend::ModelSource src, frontend::ModelSource::open(dir / "hf"));
  m.source = std::make_unique<frontend::ModelSource>(std::move(src));
  QBC_ASSIGN_OR_RETURN(frontend::HParams hp, frontend::load_hparams(dir / "hf" / "config.json"));
  frontend::ImportOptions opts;
  opts.max_cache_length = 256;
  QBC_ASSIGN_OR_RETURN(m.graph, frontend::build_decoder_graph(hp, opts));
  const auto j =
      nlohmann::json::parse(::qbc::testing::read_file(dir / "golden" / "logits_golden.json"));
  for (const auto& s : j.at("sequences")) {
    if (s.at("name") == "medium_64") m.medium = s.at("ids").get<std::vector<int32_t>>();
    if (s.at("name") == "long_200") m.calib = s.at("ids").get<std::vector<int32_t>>();
  }
  return m;
}

/// Logits of `ids` run one token per forward call.
std::vector<float> token_by_token(runner::Runner& r, const std::vector<int32_t>& ids) {
  std::vector<float> all, one;
  for (int32_t id : ids) {
    EXPECT_TRUE(r.forward({id}, &one).ok());
    all.insert(all.end(), one.begin(), one.end());
  }
  return all;
}

int64_t argmax_row(const std::vector<float>& l, int64_t row, int64_t n) {
  const auto b = l.begin() + row * n;
  return std::max_element(b, b + n) - b;
}

/// Max |a - b| and the fraction of rows whose argmax agrees.
std::pair<double, double> compare(const std::vector<float>& a, const std::vector<float>& b,
                                  int64_t n) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  const int64_t rows = static_cast<int64_t>(a.size()) / n;
  int64_t same = 0;
  for (int64_t r = 0; r < rows; ++r) same += argmax_row(a, r, n) == argmax_row(b, r, n);
  return {d, static_cast<double>(same) / static_cast<double>(rows)};
}

TEST(FakeQuantStories, UnquantizedMatchesFloatReferenceUpToFp16) {
  QBC_REQUIRE_SHARED(dir, "models/stories260k");
  auto m = load_stories(dir);
  QBC_ASSERT_OK(m);
  const ir::WeightReader reader = frontend::model_weight_reader(*m->source);
  auto fq = FakeQuantSession::create(m->graph, reader);
  QBC_ASSERT_OK(fq);
  auto fl = ref::Session::create(m->graph, reader);
  QBC_ASSERT_OK(fl);
  EXPECT_EQ((*fq)->vocab_size(), 512);
  EXPECT_EQ((*fq)->hidden_size(), 64);
  std::vector<float> a, b;
  QBC_ASSERT_OK((*fq)->forward(m->medium, &a));
  QBC_ASSERT_OK((*fl)->forward(m->medium, &b));
  ASSERT_EQ(a.size(), b.size());
  const auto [d, agree] = compare(a, b, 512);
  std::printf("[fakequant] stories260K fp16 vs float medium_64: max|d| = %.4g, argmax %.4f\n", d,
              agree);
  EXPECT_LE(d, 0.05);
  EXPECT_GE(agree, 0.99);
  // Prompt at once vs token by token: bitwise identical.
  (*fq)->reset();
  EXPECT_TRUE(bitwise_equal(token_by_token(**fq, m->medium), a));
}

// keep_activations_of keeps the named nodes alone, with the values set_keep_activations keeps;
// set_keep_activations(true) keeps every node again.
TEST(FakeQuantStories, KeepActivationsOfKeepsOnlyTheNamedNodes) {
  QBC_REQUIRE_SHARED(dir, "models/stories260k");
  auto m = load_stories(dir);
  QBC_ASSERT_OK(m);
  auto fq = FakeQuantSession::create(m->graph, frontend::model_weight_reader(*m->source));
  QBC_ASSERT_OK(fq);
  const std::string kept = m->graph.node(m->graph.outputs()[0]).name;
  std::string other;
  for (const ir::Node& n : m->graph.nodes())
    if (n.op == ir::Op::kLinear && n.name != kept) other = n.name;
  ASSERT_FALSE(other.empty());
  std::vector<float> all_kept, all_other, one_kept, v;
  (*fq)->set_keep_activations(true);
  QBC_ASSERT_OK((*fq)->forward(m->medium, nullptr));
  QBC_ASSERT_OK((*fq)->activation(kept, &all_kept, nullptr));
  QBC_ASSERT_OK((*fq)->activation(other, &all_other, nullptr));
  (*fq)->reset();
  EXPECT_EQ((*fq)->keep_activations_of({}).code(), Code::kInvalidArgument);
  EXPECT_EQ((*fq)->keep_activations_of({"no.such.node"}).code(), Code::kNotFound);
  QBC_ASSERT_OK((*fq)->keep_activations_of({kept}));
  QBC_ASSERT_OK((*fq)->forward(m->medium, nullptr));
  QBC_ASSERT_OK((*fq)->activation(kept, &one_kept, nullptr));
  EXPECT_TRUE(bitwise_equal(one_kept, all_kept));
  EXPECT_EQ((*fq)->activation(other, &v, nullptr).code(), Code::kNotFound);
  (*fq)->reset();
  (*fq)->set_keep_activations(true);
  QBC_ASSERT_OK((*fq)->forward(m->medium, nullptr));
  QBC_ASSERT_OK((*fq)->activation(other, &v, nullptr));
  EXPECT_TRUE(bitwise_equal(v, all_other));
}

// A bidirectional span call (forward_embeds_span: Gemma 3's image tokens) on stories260K after a
// causal prefix: its rows differ from the causal call's (earlier rows see later keys), a span of
// one token is the causal call bit for bit, the calls after a span continue from its cache, and
// the span's rows do not depend on whether the prefix came token by token.
TEST(FakeQuantStories, ASpanCallSeesItsLaterTokens) {
  QBC_REQUIRE_SHARED(dir, "models/stories260k");
  auto m = load_stories(dir);
  QBC_ASSERT_OK(m);
  const ir::WeightReader reader = frontend::model_weight_reader(*m->source);
  auto fq = FakeQuantSession::create(m->graph, reader);
  QBC_ASSERT_OK(fq);
  const std::vector<int32_t> prefix(m->medium.begin(), m->medium.begin() + 10);
  const std::vector<int32_t> span(m->medium.begin() + 10, m->medium.begin() + 18);
  std::vector<float> x;
  QBC_ASSERT_OK((*fq)->embed(span, &x));
  const auto n = static_cast<int64_t>(span.size());
  auto after = [&](bool as_span, bool prefix_by_token, std::vector<float>* logits,
                   std::vector<float>* next) {
    (*fq)->reset();
    if (prefix_by_token) {
      (void)token_by_token(**fq, prefix);
    } else {
      QBC_ASSERT_OK((*fq)->forward(prefix, nullptr));
    }
    QBC_ASSERT_OK(as_span ? (*fq)->forward_embeds_span(x, n, logits)
                          : (*fq)->forward_embeds(x, n, logits));
    QBC_ASSERT_OK((*fq)->forward({m->medium[18]}, next));
  };
  std::vector<float> causal, causal_next, spanned, spanned_next, again, again_next;
  after(false, false, &causal, &causal_next);
  after(true, false, &spanned, &spanned_next);
  after(true, true, &again, &again_next);
  ASSERT_EQ(spanned.size(), causal.size());
  EXPECT_FALSE(bitwise_equal(std::vector<float>(spanned.begin(), spanned.begin() + 512),
                             std::vector<float>(causal.begin(), causal.begin() + 512)));
  EXPECT_FALSE(bitwise_equal(spanned_next, causal_next));  // the cache holds the span's values
  EXPECT_TRUE(bitwise_equal(again, spanned));
  EXPECT_TRUE(bitwise_equal(again_next, spanned_next));
  // One token: nothing later to see.
  std::vector<float> one_causal, one_span, x1(x.begin(), x.begin() + 64);
  (*fq)->reset();
  QBC_ASSERT_OK((*fq)->forward(prefix, nullptr));
  QBC_ASSERT_OK((*fq)->forward_embeds(x1, 1, &one_causal));
  (*fq)->reset();
  QBC_ASSERT_OK((*fq)->forward(prefix, nullptr));
  QBC_ASSERT_OK((*fq)->forward_embeds_span(x1, 1, &one_span));
  EXPECT_TRUE(bitwise_equal(one_causal, one_span));
  EXPECT_FALSE((*fq)->forward_embeds_span(x1, 2, &one_span).ok());  // 64 values for 2 tokens
  // The float runtime's span rule (its mask) agrees with the evaluator's up to fp16, as the
  // causal rules do; its causal rows differ from its span rows as the evaluator's do.
  auto fl = ref::Session::create(m->graph, reader);
  QBC_ASSERT_OK(fl);
  std::vector<float> float_span, float_causal;
  QBC_ASSERT_OK((*fl)->forward(prefix, nullptr));
  QBC_ASSERT_OK((*fl)->forward_embeds_span(x, n, &float_span));
  (*fl)->reset();
  QBC_ASSERT_OK((*fl)->forward(prefix, nullptr));
  QBC_ASSERT_OK((*fl)->forward_embeds(x, n, &float_causal));
  ASSERT_EQ(float_span.size(), spanned.size());
  const auto [d_span, agree_span] = compare(spanned, float_span, 512);
  const auto [d_causal, agree_causal] = compare(causal, float_causal, 512);
  std::printf("[fakequant] span call vs float: max|d| = %.4g (causal %.4g), argmax %.3f\n", d_span,
              d_causal, agree_span);
  EXPECT_LE(d_span, 0.05);
  EXPECT_GE(agree_span, 0.99);
  const auto [d_rule, agree_rule] = compare(float_span, float_causal, 512);
  EXPECT_GT(d_rule, 10 * d_span);  // the rule's effect is far above the fp16 noise
}

/// A test-side RTN quantization of every linear and attention node (8-bit, max
/// calibration on `calib` through the unquantized evaluator). Sidecar weights go to `side`.
StatusOr<ir::Graph> quantize_for_test(const Model& m, const ir::WeightReader& reader, int p_bits,
                                      WeightMap* side) {
  QBC_ASSIGN_OR_RETURN(auto run, FakeQuantSession::create(m.graph, reader));
  run->set_keep_activations(true);
  QBC_RETURN_IF_ERROR(run->forward(m.calib, nullptr));
  ir::Graph g = m.graph;
  auto act = [&](const ir::Node& n, size_t i, std::vector<float>* out) {
    return run->activation(g.node(n.operands[i].value).name, out, nullptr);
  };
  auto absmax = [](const float* p, size_t n) {
    float r = 0;
    for (size_t i = 0; i < n; ++i) r = std::max(r, std::fabs(p[i]));
    return std::max(r / 127.0f, 1e-8f);
  };
  auto add_side = [&](const std::string& name, TensorType type, std::vector<float> v) {
    (*side)[name] = std::move(v);
    g.add_weight({name, std::move(type), ir::WeightSource::kSidecar, name});
  };
  for (ir::Node& n : g.mutable_nodes()) {
    std::vector<float> x;
    if (n.op == ir::Op::kLinear) {
      QBC_RETURN_IF_ERROR(act(n, 0, &x));
      const ir::Weight w = *g.find_weight(n.operands[1].weight);
      std::vector<float> wf;
      QBC_RETURN_IF_ERROR(reader(w, &wf));
      const int64_t out = w.type.dims[0], in = w.type.dims[1];
      std::vector<float> codes, scales;
      for (int64_t c = 0; c < out; ++c) {
        scales.push_back(absmax(wf.data() + c * in, static_cast<size_t>(in)));
        for (int64_t i = 0; i < in; ++i) {
          codes.push_back(
              static_cast<float>(numerics::quantize_symmetric(wf[c * in + i], scales.back(), 8)));
        }
      }
      add_side(n.name + ".wq", {DType::kI8, {out, in}}, codes);
      add_side(n.name + ".wscale", {DType::kF32, {out}}, scales);
      g.remove_weight(w.name);
      n.op = ir::Op::kQLinear;
      n.operands[1] = ir::Operand::of_weight(n.name + ".wq");
      n.operands.insert(n.operands.begin() + 2, ir::Operand::of_weight(n.name + ".wscale"));
      n.attrs.set("in_scale", static_cast<double>(absmax(x.data(), x.size())));
      n.attrs.set("in_bits", int64_t{8});
      n.attrs.set("w_bits", int64_t{8});
      n.attrs.set("out_fp16", int64_t{n.part == ir::Part::kBody ? 1 : 0});
    } else if (n.op == ir::Op::kAttention) {
      const int64_t heads = n.attrs.get_int("num_heads"), d = n.attrs.get_int("head_dim");
      const int64_t kvw = n.attrs.get_int("num_kv_heads") * d, seq = m.calib.size();
      std::vector<float> q, k, v;
      for (auto [i, dst] : {std::pair{0, &q}, {1, &k}, {2, &v}}) {
        QBC_RETURN_IF_ERROR(act(n, i, dst));
      }
      std::vector<double> ks(static_cast<size_t>(kvw)), vs(ks.size()), qs;
      for (int64_t c = 0; c < kvw; ++c) {
        const int64_t pair = c % d < d / 2 ? c + d / 2 : c - d / 2;
        float km = 0, vm = 0;
        for (int64_t t = 0; t < seq; ++t) {
          km = std::max({km, std::fabs(k[t * kvw + c]), std::fabs(k[t * kvw + pair])});
          vm = std::max(vm, std::fabs(v[t * kvw + c]));
        }
        ks[c] = std::max(km / 127.0f, 1e-8f);
        vs[c] = std::max(vm / 127.0f, 1e-8f);
      }
      const int64_t groups = heads / (kvw / d);
      for (int64_t hq = 0; hq < heads; ++hq) {
        float qm = 0;
        for (int64_t t = 0; t < seq; ++t) {
          for (int64_t i = 0; i < d; ++i) {
            const float sk = static_cast<float>(ks[(hq / groups) * d + i]);
            qm = std::max(qm, std::fabs(numerics::round_fp16(q[t * heads * d + hq * d + i] * sk)));
          }
        }
        qs.push_back(std::max(qm / 127.0f, 1e-8f));
      }
      n.attrs.set("k_bits", int64_t{8});
      n.attrs.set("v_bits", int64_t{8});
      n.attrs.set("p_bits", int64_t{p_bits});
      n.attrs.set("q_scale", qs);
      n.attrs.set("k_scale", ks);
      n.attrs.set("v_scale", vs);
    }
  }
  return g;
}

TEST(FakeQuantStories, QuantizedIsDeterministicAndBatchIndependent) {
  QBC_REQUIRE_SHARED(dir, "models/stories260k");
  auto m = load_stories(dir);
  QBC_ASSERT_OK(m);
  const ir::WeightReader base = frontend::model_weight_reader(*m->source);
  auto fl = FakeQuantSession::create(m->graph, base);
  QBC_ASSERT_OK(fl);
  std::vector<float> ref_logits;
  QBC_ASSERT_OK((*fl)->forward(m->medium, &ref_logits));
  for (int p_bits : {8, 16}) {
    WeightMap side;
    auto g = quantize_for_test(*m, base, p_bits, &side);
    QBC_ASSERT_OK(g);
    const ir::WeightReader reader = map_reader(side, base);
    auto s1 = FakeQuantSession::create(*g, reader);
    auto s2 = FakeQuantSession::create(*g, reader);
    QBC_ASSERT_OK(s1);
    QBC_ASSERT_OK(s2);
    std::vector<float> a, b;
    QBC_ASSERT_OK((*s1)->forward(m->medium, &a));
    QBC_ASSERT_OK((*s2)->forward(m->medium, &b));
    EXPECT_TRUE(bitwise_equal(a, b)) << "two sessions, p_bits " << p_bits;
    (*s1)->reset();
    EXPECT_TRUE(bitwise_equal(token_by_token(**s1, m->medium), a))
        << "prefill vs token by token, p_bits " << p_bits;
    KvCacheSnapshot kv;
    QBC_ASSERT_OK((*s1)->kv_cache("blk.0.attn.sdpa", &kv));
    EXPECT_TRUE(kv.quantized);
    EXPECT_EQ(kv.tokens, static_cast<int64_t>(m->medium.size()));
    const auto [lo, hi] = std::minmax_element(kv.k_codes.begin(), kv.k_codes.end());
    EXPECT_GE(*lo, -128);
    EXPECT_LE(*hi, 127);
    const auto [d, agree] = compare(a, ref_logits, 512);
    std::printf(
        "[fakequant] stories260K W8A8 KV8 P%d vs fp16 medium_64: max|d| = %.4g, "
        "argmax %.4f\n",
        p_bits, d, agree);
    EXPECT_GE(agree, 0.7);
  }
}

}  // namespace
}  // namespace qbc::quant
