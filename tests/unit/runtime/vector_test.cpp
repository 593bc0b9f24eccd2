// rms_norm, layer_norm, rope, rope_table, avg_pool and the elementwise ops against their numerics
// kernels, bit for bit: whole rows and grouped norms (weights [group], shared by every group),
// layer_norm with and without bias and over rows with a large common offset, rope over runtime
// positions with LongRoPE frequencies (a call split into two row tiles that name the call's last
// position rotates as the whole call), every elementwise op on fp16 body values and on fp32 head
// values, norms with outputs of every magnitude, gated activations of every gate pattern.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "qbc/numerics/elementwise.h"
#include "qbc/numerics/fp16.h"
#include "qbc/numerics/norm.h"
#include "qbc/numerics/pool.h"
#include "qbc/numerics/rope.h"
#include "test_bundle.h"
#include "test_support.h"

namespace qbc::runtime {
namespace {

using isa::Expr;
using testing::BundleBuilder;

const Expr kSeq = Expr::sym(isa::Sym::kSeq);
const Expr kStart = Expr::sym(isa::Sym::kStart);

/// Runs the prefill program of `bb` at (start, seq) and returns the device.
std::shared_ptr<Device> run(BundleBuilder& bb, int32_t in, const std::vector<uint8_t>& x,
                            int64_t start, int64_t seq) {
  std::shared_ptr<Device> d = testing::make_device(bb.finish());
  if (d == nullptr) return nullptr;
  testing::write(*d, in, x);
  const Status s = d->run(isa::Phase::kPrefill, 0, start, seq);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return d;
}

struct NormCase {
  int64_t width, group;
  double unit_offset;
};

class RuntimeRmsNorm : public ::testing::TestWithParam<NormCase> {};

TEST_P(RuntimeRmsNorm, EqualsNumerics) {
  const NormCase& c = GetParam();
  const int64_t s = 3, n = s * c.width, wn = c.group > 0 ? c.group : c.width;
  const std::vector<float> x = testing::random_f16(static_cast<size_t>(n), 21, 3.0f);
  const std::vector<float> w = testing::random_f16(static_cast<size_t>(wn), 22, 1.5f);
  BundleBuilder bb;
  const int32_t x_d = bb.dram("x", isa::Purpose::kActivations, n * 2);
  const int32_t y_d = bb.dram("y", isa::Purpose::kActivations, n * 2);
  const int32_t w_d = bb.weights("w", testing::raw_bytes(w));
  const int32_t x_s = bb.sram("x", 0, n * 2), y_s = bb.sram("y", 0, n * 2);
  const int32_t w_s = bb.sram("w", 0, wn * 4);
  bb.copy(0, bb.ref(x_s), bb.ref(x_d), c.width * 2, kSeq);
  bb.copy(0, bb.ref(w_s), bb.ref(w_d), wn * 4);
  isa::RmsNorm op;
  op.x = bb.ref(x_s);
  op.weight = bb.ref(w_s);
  op.y = bb.ref(y_s);
  op.rows = kSeq;
  op.width = c.width;
  op.group = c.group;
  op.eps = 1e-5;
  op.unit_offset = c.unit_offset;
  bb.emit(0, op);
  bb.copy(0, bb.ref(y_d), bb.ref(y_s), c.width * 2, kSeq);
  std::shared_ptr<Device> d = run(bb, x_d, testing::f16_bytes(x), 0, s);
  ASSERT_NE(d, nullptr);
  std::vector<float> want(static_cast<size_t>(n));
  numerics::rms_norm(x.data(), s, c.width, w, 1e-5, c.unit_offset, c.group, want.data());
  EXPECT_TRUE(testing::same_bits(testing::f16_values(testing::read(*d, y_d, n * 2)), want));
  EXPECT_EQ(d->counters()[0].vector_ops, n);
}

INSTANTIATE_TEST_SUITE_P(Cases, RuntimeRmsNorm,
                         ::testing::Values(NormCase{32, 0, 0.0}, NormCase{32, 8, 1.0},
                                           NormCase{48, 16, 0.0}));

// Outputs from fp16 overflow down through the subnormals to zero (the executor rounds the
// fp64 products itself on the normal range, and through round_fp16 elsewhere).
TEST(RuntimeRmsNorm, OutputsOfEveryMagnitudeEqualNumerics) {
  const int64_t s = 4, width = 512, n = s * width;
  const std::vector<float> x = testing::random_f16(static_cast<size_t>(n), 31, 4.0f);
  std::vector<float> w(static_cast<size_t>(width));
  for (int64_t i = 0; i < width; ++i) {  // |w| from 1e-9 to 1e5, both signs
    const double e = -9.0 + 14.0 * static_cast<double>(i) / static_cast<double>(width);
    w[static_cast<size_t>(i)] = static_cast<float>((i % 2 ? -1.0 : 1.0) * std::pow(10.0, e));
  }
  BundleBuilder bb(1, 1, 1 << 16);
  const int32_t x_d = bb.dram("x", isa::Purpose::kActivations, n * 2);
  const int32_t y_d = bb.dram("y", isa::Purpose::kActivations, n * 2);
  const int32_t w_d = bb.weights("w", testing::raw_bytes(w));
  const int32_t x_s = bb.sram("x", 0, n * 2), y_s = bb.sram("y", 0, n * 2);
  const int32_t w_s = bb.sram("w", 0, width * 4);
  bb.copy(0, bb.ref(x_s), bb.ref(x_d), width * 2, kSeq);
  bb.copy(0, bb.ref(w_s), bb.ref(w_d), width * 4);
  isa::RmsNorm op;
  op.x = bb.ref(x_s);
  op.weight = bb.ref(w_s);
  op.y = bb.ref(y_s);
  op.rows = kSeq;
  op.width = width;
  op.eps = 1e-6;
  bb.emit(0, op);
  bb.copy(0, bb.ref(y_d), bb.ref(y_s), width * 2, kSeq);
  std::shared_ptr<Device> d = run(bb, x_d, testing::f16_bytes(x), 0, s);
  ASSERT_NE(d, nullptr);
  std::vector<float> want(static_cast<size_t>(n));
  numerics::rms_norm(x.data(), s, width, w, 1e-6, 0.0, 0, want.data());
  EXPECT_TRUE(testing::same_bits(testing::f16_values(testing::read(*d, y_d, n * 2)), want));
}

struct LayerNormCase {
  int64_t width;
  bool bias;
  float scale;  // of the inputs: small, and large with a common offset
};

class RuntimeLayerNorm : public ::testing::TestWithParam<LayerNormCase> {};

// The parameters sit in one fp32 block [2, width]: the weight row, then the bias row (zeros
// when the norm has none; numerics adds 0 for a null bias, so the bits agree either way).
TEST_P(RuntimeLayerNorm, EqualsNumerics) {
  const LayerNormCase& c = GetParam();
  const int64_t s = 3, n = s * c.width;
  std::vector<float> x = testing::random_f16(static_cast<size_t>(n), 41, c.scale);
  if (c.scale > 100.0f) {
    for (float& v : x) v = numerics::round_fp16(static_cast<double>(v) + 3.0 * c.scale);
  }
  const std::vector<float> w = testing::random_f16(static_cast<size_t>(c.width), 42, 1.5f);
  std::vector<float> b(static_cast<size_t>(c.width), 0.0f);
  if (c.bias) b = testing::random_f16(static_cast<size_t>(c.width), 43, 0.5f);
  std::vector<float> params = w;
  params.insert(params.end(), b.begin(), b.end());
  BundleBuilder bb;
  const int32_t x_d = bb.dram("x", isa::Purpose::kActivations, n * 2);
  const int32_t y_d = bb.dram("y", isa::Purpose::kActivations, n * 2);
  const int32_t w_d = bb.weights("w", testing::raw_bytes(params));
  const int32_t x_s = bb.sram("x", 0, n * 2), y_s = bb.sram("y", 0, n * 2);
  const int32_t w_s = bb.sram("w", 0, c.width * 8);
  bb.copy(0, bb.ref(x_s), bb.ref(x_d), c.width * 2, kSeq);
  bb.copy(0, bb.ref(w_s), bb.ref(w_d), c.width * 8);
  isa::LayerNorm op;
  op.x = bb.ref(x_s);
  op.weight = bb.ref(w_s);
  op.y = bb.ref(y_s);
  op.rows = kSeq;
  op.width = c.width;
  op.eps = 1e-5;
  bb.emit(0, op);
  bb.copy(0, bb.ref(y_d), bb.ref(y_s), c.width * 2, kSeq);
  std::shared_ptr<Device> d = run(bb, x_d, testing::f16_bytes(x), 0, s);
  ASSERT_NE(d, nullptr);
  std::vector<float> want(static_cast<size_t>(n));
  numerics::layer_norm(x.data(), s, c.width, w.data(), c.bias ? b.data() : nullptr, 1e-5,
                       want.data());
  EXPECT_TRUE(testing::same_bits(testing::f16_values(testing::read(*d, y_d, n * 2)), want));
  EXPECT_EQ(d->counters()[0].vector_ops, n);
}

INSTANTIATE_TEST_SUITE_P(Cases, RuntimeLayerNorm,
                         ::testing::Values(LayerNormCase{32, false, 3.0f},
                                           LayerNormCase{48, true, 3.0f},
                                           LayerNormCase{64, true, 1000.0f}));

isa::RopeDesc long_rope() {
  isa::RopeDesc r;
  r.heads = 2;
  r.head_dim = 8;
  r.rotary_dim = 6;
  r.inv_freq = {1.0, 0.1, 0.01};
  r.long_inv_freq = {0.5, 0.05, 0.005};
  r.original_max_positions = 4;
  return r;
}

numerics::Rope to_numerics(const isa::RopeDesc& d) {
  numerics::Rope r;
  r.heads = d.heads;
  r.head_dim = d.head_dim;
  r.rotary_dim = d.rotary_dim;
  r.inv_freq = d.inv_freq;
  r.long_inv_freq = d.long_inv_freq;
  r.original_max_positions = d.original_max_positions;
  return r;
}

/// One rope instruction for the whole call, or two row tiles (2 rows, then the rest).
void rope_at(bool tiled) {
  const int64_t start = 2, s = 5, width = 16, n = s * width;
  const std::vector<float> x = testing::random_f16(static_cast<size_t>(n), 31, 2.0f);
  BundleBuilder bb;
  bb.bundle().ropes.push_back(long_rope());
  const int32_t x_d = bb.dram("x", isa::Purpose::kActivations, n * 2);
  const int32_t y_d = bb.dram("y", isa::Purpose::kActivations, n * 2);
  const int32_t x_s = bb.sram("x", 0, n * 2), y_s = bb.sram("y", 0, n * 2);
  bb.copy(0, bb.ref(x_s), bb.ref(x_d), width * 2, kSeq);
  isa::Rope op;
  op.rope = 0;
  op.freq_pos = kStart + kSeq - 1;
  if (tiled) {
    op.x = bb.ref(x_s);
    op.y = bb.ref(y_s);
    op.rows = 2;
    op.pos0 = kStart;
    bb.emit(0, op);
    op.x = bb.ref(x_s, Expr(2 * width * 2));
    op.y = bb.ref(y_s, Expr(2 * width * 2));
    op.rows = kSeq - 2;
    op.pos0 = kStart + 2;
    bb.emit(0, op);
  } else {
    op.x = bb.ref(x_s);
    op.y = bb.ref(y_s);
    op.rows = kSeq;
    op.pos0 = kStart;
    bb.emit(0, op);
  }
  bb.copy(0, bb.ref(y_d), bb.ref(y_s), width * 2, kSeq);
  std::shared_ptr<Device> d = run(bb, x_d, testing::f16_bytes(x), start, s);
  ASSERT_NE(d, nullptr);
  std::vector<float> want(static_cast<size_t>(n));
  numerics::rope(x.data(), s, start, to_numerics(long_rope()), want.data());
  EXPECT_TRUE(testing::same_bits(testing::f16_values(testing::read(*d, y_d, n * 2)), want));
}

TEST(RuntimeRope, EqualsNumericsAtRuntimePositions) { rope_at(false); }
TEST(RuntimeRope, RowTilesNamingTheLastPositionEqualTheWholeCall) { rope_at(true); }

// rope_table (M-RoPE): host tables in their own fp16 rows, the call split into two row tiles
// (each reads its rows of x and of both tables), bit for bit numerics::rope_table.
TEST(RuntimeRopeTable, RowTilesWithHostTablesEqualNumerics) {
  const int64_t s = 5, heads = 2, hd = 8, width = heads * hd, half = hd / 2, n = s * width;
  const std::vector<float> x = testing::random_f16(static_cast<size_t>(n), 41, 2.0f);
  const std::vector<float> cs = testing::random_f16(static_cast<size_t>(s * half), 42, 1.0f);
  const std::vector<float> sn = testing::random_f16(static_cast<size_t>(s * half), 43, 1.0f);
  BundleBuilder bb;
  const int32_t x_d = bb.dram("x", isa::Purpose::kActivations, n * 2);
  const int32_t c_d = bb.dram("cos", isa::Purpose::kActivations, s * half * 2);
  const int32_t s_d = bb.dram("sin", isa::Purpose::kActivations, s * half * 2);
  const int32_t y_d = bb.dram("y", isa::Purpose::kActivations, n * 2);
  const int32_t x_s = bb.sram("x", 0, n * 2), y_s = bb.sram("y", 0, n * 2);
  const int32_t c_s = bb.sram("cos", 0, s * half * 2), s_s = bb.sram("sin", 0, s * half * 2);
  bb.copy(0, bb.ref(x_s), bb.ref(x_d), width * 2, kSeq);
  bb.copy(0, bb.ref(c_s), bb.ref(c_d), half * 2, kSeq);
  bb.copy(0, bb.ref(s_s), bb.ref(s_d), half * 2, kSeq);
  isa::RopeTable op;
  op.heads = heads;
  op.head_dim = hd;
  for (int tile = 0; tile < 2; ++tile) {
    const int64_t r0 = tile == 0 ? 0 : 2;
    op.x = bb.ref(x_s, Expr(r0 * width * 2));
    op.cos = bb.ref(c_s, Expr(r0 * half * 2));
    op.sin = bb.ref(s_s, Expr(r0 * half * 2));
    op.y = bb.ref(y_s, Expr(r0 * width * 2));
    op.rows = tile == 0 ? Expr(2) : kSeq - 2;
    bb.emit(0, op);
  }
  bb.copy(0, bb.ref(y_d), bb.ref(y_s), width * 2, kSeq);
  std::shared_ptr<Device> d = testing::make_device(bb.finish());
  ASSERT_NE(d, nullptr);
  testing::write(*d, x_d, testing::f16_bytes(x));
  testing::write(*d, c_d, testing::f16_bytes(cs));
  testing::write(*d, s_d, testing::f16_bytes(sn));
  QBC_ASSERT_OK(d->run(isa::Phase::kPrefill, 0, 0, s));
  std::vector<float> want(static_cast<size_t>(n));
  numerics::rope_table(x.data(), cs.data(), sn.data(), s, heads, hd, want.data());
  const std::vector<float> got = testing::f16_values(testing::read(*d, y_d, n * 2));
  EXPECT_TRUE(testing::same_bits(got, want));
  EXPECT_FALSE(testing::same_bits(got, x));  // the tables rotate
  EXPECT_EQ(d->counters()[0].vector_ops, n);
}

struct EltCase {
  isa::EltOp op;
  isa::DType type;
};

class RuntimeEltwise : public ::testing::TestWithParam<EltCase> {};

TEST_P(RuntimeEltwise, EqualsNumerics) {
  const EltCase& c = GetParam();
  const int64_t s = 3, width = 24, n = s * width;
  const bool f16 = c.type == isa::DType::kF16;
  const int64_t eb = f16 ? 2 : 4;
  std::vector<float> a = testing::random_f16(static_cast<size_t>(n), 41, 6.0f);
  std::vector<float> b = testing::random_f16(static_cast<size_t>(n), 42, 6.0f);
  if (!f16) {  // fp32 head values: not fp16-representable
    for (size_t i = 0; i < a.size(); ++i) a[i] = a[i] * 1.0001f + 1e-4f;
  }
  auto bytes = [&](const std::vector<float>& v) {
    return f16 ? testing::f16_bytes(v) : testing::raw_bytes(v);
  };
  BundleBuilder bb;
  const int32_t a_d = bb.dram("a", isa::Purpose::kActivations, n * eb);
  const int32_t b_d = bb.weights("b", bytes(b));
  const int32_t y_d = bb.dram("y", isa::Purpose::kActivations, n * eb);
  const int32_t a_s = bb.sram("a", 0, n * eb), b_s = bb.sram("b", 0, n * eb);
  const int32_t y_s = bb.sram("y", 0, n * eb);
  bb.copy(0, bb.ref(a_s), bb.ref(a_d), width * eb, kSeq);
  bb.copy(0, bb.ref(b_s), bb.ref(b_d), n * eb);
  isa::Eltwise op;
  op.op = c.op;
  op.a = bb.ref(a_s);
  op.b = bb.ref(b_s);
  op.y = bb.ref(y_s);
  op.rows = kSeq;
  op.width = width;
  op.factor = c.op == isa::EltOp::kSoftcap ? 5.0f : 0.37f;
  op.type = c.type;
  bb.emit(0, op);
  bb.copy(0, bb.ref(y_d), bb.ref(y_s), width * eb, kSeq);
  std::shared_ptr<Device> d = run(bb, a_d, bytes(a), 0, s);
  ASSERT_NE(d, nullptr);
  std::vector<float> want(static_cast<size_t>(n));
  switch (c.op) {
    case isa::EltOp::kAdd:
      numerics::add(a.data(), b.data(), n, f16, want.data());
      break;
    case isa::EltOp::kSilu:
    case isa::EltOp::kGelu:
      numerics::gated_act(a.data(), b.data(), n, c.op == isa::EltOp::kGelu, f16, want.data());
      break;
    case isa::EltOp::kScale:
      numerics::scale(a.data(), n, op.factor, f16, want.data());
      break;
    case isa::EltOp::kSoftcap:
      numerics::softcap(a.data(), n, op.factor, f16, want.data());
      break;
    case isa::EltOp::kGeluErf:
    case isa::EltOp::kGeluQuick:
      numerics::gelu(a.data(), n, f16, want.data(), c.op == isa::EltOp::kGeluQuick);
      break;
    case isa::EltOp::kGeluTanh:
      numerics::gelu_tanh(a.data(), n, f16, want.data());
      break;
  }
  const std::vector<uint8_t> y = testing::read(*d, y_d, n * eb);
  EXPECT_TRUE(
      testing::same_bits(f16 ? testing::f16_values(y) : testing::values_of<float>(y), want));
}

// The fp16 GELUs run from a table over the input's bit pattern: every non-NaN fp16 value gives
// numerics::gelu's bits (erf and quick_gelu; numerics::gelu_tanh's for SigLIP's tanh GELU),
// 8192 values per run (the test core's SRAM).
TEST(RuntimeGelu, EveryFp16PatternEqualsNumerics) {
  std::vector<float> all;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float v = numerics::fp16_from_bits(static_cast<uint16_t>(h));
    if (!std::isnan(v)) all.push_back(v);
  }
  const int64_t width = 1024, s = 8, n = s * width;
  all.resize((all.size() + n - 1) / n * n, 0.0f);
  for (const isa::EltOp op :
       {isa::EltOp::kGeluErf, isa::EltOp::kGeluQuick, isa::EltOp::kGeluTanh}) {
    BundleBuilder bb;
    const int32_t a_d = bb.dram("a", isa::Purpose::kActivations, n * 2);
    const int32_t y_d = bb.dram("y", isa::Purpose::kActivations, n * 2);
    const int32_t a_s = bb.sram("a", 0, n * 2), y_s = bb.sram("y", 0, n * 2);
    bb.copy(0, bb.ref(a_s), bb.ref(a_d), width * 2, kSeq);
    isa::Eltwise e;
    e.op = op;
    e.a = bb.ref(a_s);
    e.y = bb.ref(y_s);
    e.rows = kSeq;
    e.width = width;
    bb.emit(0, e);
    bb.copy(0, bb.ref(y_d), bb.ref(y_s), width * 2, kSeq);
    int64_t differ = 0;
    for (size_t at = 0; at < all.size(); at += static_cast<size_t>(n)) {
      const std::vector<float> x(all.begin() + static_cast<std::ptrdiff_t>(at),
                                 all.begin() + static_cast<std::ptrdiff_t>(at) + n);
      std::shared_ptr<Device> d = run(bb, a_d, testing::f16_bytes(x), 0, s);
      ASSERT_NE(d, nullptr);
      std::vector<float> want(static_cast<size_t>(n));
      if (op == isa::EltOp::kGeluTanh) {
        numerics::gelu_tanh(x.data(), n, true, want.data());
      } else {
        numerics::gelu(x.data(), n, true, want.data(), op == isa::EltOp::kGeluQuick);
      }
      const std::vector<float> got = testing::f16_values(testing::read(*d, y_d, n * 2));
      if (!testing::same_bits(got, want)) ++differ;
    }
    EXPECT_EQ(differ, 0) << isa::elt_name(op);
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, RuntimeEltwise,
                         ::testing::Values(EltCase{isa::EltOp::kAdd, isa::DType::kF16},
                                           EltCase{isa::EltOp::kSilu, isa::DType::kF16},
                                           EltCase{isa::EltOp::kGelu, isa::DType::kF16},
                                           EltCase{isa::EltOp::kScale, isa::DType::kF16},
                                           EltCase{isa::EltOp::kSoftcap, isa::DType::kF16},
                                           EltCase{isa::EltOp::kAdd, isa::DType::kF32},
                                           EltCase{isa::EltOp::kScale, isa::DType::kF32},
                                           EltCase{isa::EltOp::kSoftcap, isa::DType::kF32},
                                           EltCase{isa::EltOp::kGeluErf, isa::DType::kF16},
                                           EltCase{isa::EltOp::kGeluQuick, isa::DType::kF16},
                                           EltCase{isa::EltOp::kGeluTanh, isa::DType::kF16},
                                           EltCase{isa::EltOp::kGeluErf, isa::DType::kF32},
                                           EltCase{isa::EltOp::kGeluQuick, isa::DType::kF32},
                                           EltCase{isa::EltOp::kGeluTanh, isa::DType::kF32}),
                         [](const ::testing::TestParamInfo<EltCase>& i) {
                           return std::string(isa::elt_name(i.param.op)) + "_" +
                                  isa::dtype_name(i.param.type);
                         });

struct PoolCase {
  int64_t grid_h, grid_w, kernel, width;
};

class RuntimeAvgPool : public ::testing::TestWithParam<PoolCase> {};

// avg_pool over whole bands of the grid, run as two calls of half the bands each (the tiles the
// backend makes), equals numerics::avg_pool over the whole grid bit for bit; values of both
// signs and large magnitudes (the fp64 sum, one rounding to fp32, then fp16).
TEST_P(RuntimeAvgPool, EqualsNumerics) {
  const PoolCase& c = GetParam();
  const int64_t k2 = c.kernel * c.kernel, ow = c.grid_w / c.kernel;
  const int64_t in_rows = c.grid_h * c.grid_w, out_rows = in_rows / k2;
  const int64_t n_in = in_rows * c.width, n_out = out_rows * c.width;
  std::vector<float> x = testing::random_f16(static_cast<size_t>(n_in), 51, 4.0f);
  for (size_t i = 0; i < x.size(); i += 37) x[i] = (i % 2 ? -1.0f : 1.0f) * 60000.0f;
  BundleBuilder bb(1, 1, 1 << 20);
  const int32_t x_d = bb.dram("x", isa::Purpose::kActivations, n_in * 2);
  const int32_t y_d = bb.dram("y", isa::Purpose::kActivations, n_out * 2);
  const int32_t x_s = bb.sram("x", 0, n_in * 2), y_s = bb.sram("y", 0, n_out * 2);
  bb.copy(0, bb.ref(x_s), bb.ref(x_d), n_in * 2);
  const int64_t half = out_rows / ow / 2 * ow;  // whole bands in the first call
  for (const auto& [row0, rows] : {std::pair{int64_t{0}, half}, {half, out_rows - half}}) {
    isa::AvgPool op;
    op.x = bb.ref(x_s, row0 * k2 * c.width * 2);
    op.y = bb.ref(y_s, row0 * c.width * 2);
    op.rows = Expr(rows);
    op.width = c.width;
    op.grid_w = c.grid_w;
    op.kernel = static_cast<int32_t>(c.kernel);
    bb.emit(0, op);
  }
  bb.copy(0, bb.ref(y_d), bb.ref(y_s), n_out * 2);
  std::shared_ptr<Device> d = run(bb, x_d, testing::f16_bytes(x), 0, 1);
  ASSERT_NE(d, nullptr);
  std::vector<float> want(static_cast<size_t>(n_out));
  numerics::avg_pool(x.data(), c.grid_h, c.grid_w, c.width, c.kernel, true, want.data());
  EXPECT_TRUE(testing::same_bits(testing::f16_values(testing::read(*d, y_d, n_out * 2)), want));
  EXPECT_EQ(d->counters()[0].vector_ops, n_in);
}

INSTANTIATE_TEST_SUITE_P(Cases, RuntimeAvgPool,
                         ::testing::Values(PoolCase{8, 8, 4, 16}, PoolCase{12, 8, 2, 24},
                                           PoolCase{16, 16, 4, 8}, PoolCase{6, 6, 3, 5},
                                           PoolCase{4, 4, 1, 8}));

// A count of output rows that is not whole bands of grid_w / kernel windows is refused (its
// inputs would not be whole grid rows).
TEST(RuntimeAvgPool, RowsThatAreNotWholeBandsAreRefused) {
  BundleBuilder bb;
  const int32_t x_d = bb.dram("x", isa::Purpose::kActivations, 64 * 8 * 2);
  const int32_t x_s = bb.sram("x", 0, 64 * 8 * 2), y_s = bb.sram("y", 0, 4 * 8 * 2);
  bb.copy(0, bb.ref(x_s), bb.ref(x_d), 64 * 8 * 2);
  isa::AvgPool op;
  op.x = bb.ref(x_s);
  op.y = bb.ref(y_s);
  op.rows = Expr(3);  // a band is 2 windows (grid_w 8, kernel 4)
  op.width = 8;
  op.grid_w = 8;
  op.kernel = 4;
  bb.emit(0, op);
  std::shared_ptr<Device> d = testing::make_device(bb.finish());
  ASSERT_NE(d, nullptr);
  const Status s = d->run(isa::Phase::kPrefill, 0, 0, 1);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not whole bands of 2 windows"), std::string::npos) << s.to_string();
}

// The gated activations for every one of the 65536 gate patterns (the executor reads them
// from a table over the patterns), against up values of both signs, zeros and infinities.
TEST(RuntimeEltwise, GatedActivationsOfEveryGatePatternEqualNumerics) {
  const int64_t n = 65536;
  std::vector<float> gate(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    gate[static_cast<size_t>(i)] = numerics::fp16_from_bits(static_cast<uint16_t>(i));
  std::vector<float> up = testing::random_f16(static_cast<size_t>(n), 43, 8.0f);
  for (int64_t i = 0; i < n; i += 97) up[static_cast<size_t>(i)] = 0.0f;
  for (int64_t i = 5; i < n; i += 1013)
    up[static_cast<size_t>(i)] = (i % 2 ? -1 : 1) * std::numeric_limits<float>::infinity();
  for (isa::EltOp kind : {isa::EltOp::kSilu, isa::EltOp::kGelu}) {
    BundleBuilder bb(1, 1, 1 << 20);
    const int32_t a_d = bb.dram("a", isa::Purpose::kActivations, n * 2);
    const int32_t b_d = bb.dram("b", isa::Purpose::kActivations, n * 2);
    const int32_t y_d = bb.dram("y", isa::Purpose::kActivations, n * 2);
    const int32_t a_s = bb.sram("a", 0, n * 2), b_s = bb.sram("b", 0, n * 2);
    const int32_t y_s = bb.sram("y", 0, n * 2);
    bb.copy(0, bb.ref(a_s), bb.ref(a_d), n * 2);
    bb.copy(0, bb.ref(b_s), bb.ref(b_d), n * 2);
    isa::Eltwise op;
    op.op = kind;
    op.a = bb.ref(a_s);
    op.b = bb.ref(b_s);
    op.y = bb.ref(y_s);
    op.width = n;
    op.type = isa::DType::kF16;
    bb.emit(0, op);
    bb.copy(0, bb.ref(y_d), bb.ref(y_s), n * 2);
    std::shared_ptr<Device> d = testing::make_device(bb.finish());
    ASSERT_NE(d, nullptr);
    testing::write(*d, a_d, testing::f16_bytes(gate));
    testing::write(*d, b_d, testing::f16_bytes(up));
    QBC_ASSERT_OK(d->run(isa::Phase::kDecode, 0, 0, 1));
    std::vector<float> want(static_cast<size_t>(n));
    numerics::gated_act(gate.data(), up.data(), n, kind == isa::EltOp::kGelu, true, want.data());
    const std::vector<float> got = testing::f16_values(testing::read(*d, y_d, n * 2));
    for (int64_t i = 0; i < n; ++i) {
      const float g = got[static_cast<size_t>(i)], w = want[static_cast<size_t>(i)];
      if (std::isnan(w)) {
        ASSERT_TRUE(std::isnan(g)) << isa::elt_name(kind) << " gate pattern " << i;
      } else {
        ASSERT_TRUE(testing::same_bits({g}, {w})) << isa::elt_name(kind) << " gate pattern " << i;
      }
    }
  }
}

TEST(RuntimeFill, SetsStartValuesOfMaximaAndSums) {
  BundleBuilder bb(1, 1, 1 << 12, /*chunk=*/8);
  const int32_t mx_d = bb.dram("mx", isa::Purpose::kScratch, 8 * 4);
  const int32_t sum_d = bb.dram("sum", isa::Purpose::kScratch, 8 * 8);
  const int32_t mx = bb.sram("mx", 0, 8 * 4), sum = bb.sram("sum", 0, 8 * 8);
  bb.emit(0, isa::Fill{bb.ref(mx), kSeq * 2, isa::DType::kF32, -INFINITY});
  bb.emit(0, isa::Fill{bb.ref(sum), kSeq, isa::DType::kI64, 7.0});
  bb.copy(0, bb.ref(mx_d), bb.ref(mx), 8 * 4);
  bb.copy(0, bb.ref(sum_d), bb.ref(sum), 8 * 8);
  std::shared_ptr<Device> d = testing::make_device(bb.finish());
  ASSERT_NE(d, nullptr);
  QBC_ASSERT_OK(d->run(isa::Phase::kPrefill, 0, 0, 3));
  const std::vector<float> m = testing::values_of<float>(testing::read(*d, mx_d, 8 * 4));
  const std::vector<int64_t> s = testing::values_of<int64_t>(testing::read(*d, sum_d, 8 * 8));
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(m[static_cast<size_t>(i)], i < 6 ? -INFINITY : 0.0f) << i;
    EXPECT_EQ(s[static_cast<size_t>(i)], i < 3 ? 7 : 0) << i;
  }
  EXPECT_EQ(d->counters()[0].vector_ops, 9);
  BundleBuilder bad;
  const int32_t y = bad.sram("y", 0, 64);
  bad.emit(0, isa::Fill{bad.ref(y), 4, isa::DType::kF16, 0.0});
  EXPECT_EQ(Device::create(bad.finish(), DeviceOptions()).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace qbc::runtime
