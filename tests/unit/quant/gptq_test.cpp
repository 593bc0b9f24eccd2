// Tests of GPTQ for one linear layer and of the Hessian accumulator
// (include/qbc/quant/gptq.h): GPTQ beats round-to-nearest on the calibration
// outputs, its loss equals the damped quadratic form it minimises, codes and
// scales follow docs/numerics.md, singular and broken Hessians, determinism
// across runs and thread counts, and the accumulator against a naive sum.
#include "qbc/quant/gptq.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "qbc/numerics/fp16.h"
#include "test_support.h"

namespace qbc::quant {
namespace {

/// A linear layer and calibration inputs with correlated features, a few of them large.
struct Problem {
  int64_t out = 0, in = 0, rows = 0;
  std::vector<float> W;  // [out, in]
  std::vector<float> X;  // [rows, in]
};

Problem make_problem(int64_t out, int64_t in, int64_t rows, uint32_t seed) {
  Problem p;
  p.out = out;
  p.in = in;
  p.rows = rows;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t latent = std::max<int64_t>(4, in / 4);
  std::vector<float> mix(static_cast<size_t>(latent * in));
  for (float& v : mix) v = normal(rng);
  std::vector<float> col_scale(static_cast<size_t>(in), 1.0f);
  for (int64_t c = 0; c < in; c += 17) col_scale[c] = 8.0f;  // outlier features
  p.X.resize(static_cast<size_t>(rows * in));
  std::vector<float> z(static_cast<size_t>(latent));
  for (int64_t t = 0; t < rows; ++t) {
    for (float& v : z) v = normal(rng);
    for (int64_t c = 0; c < in; ++c) {
      float acc = 0.6f * normal(rng);
      for (int64_t l = 0; l < latent; ++l) acc += z[l] * mix[l * in + c] / 3.0f;
      p.X[t * in + c] = acc * col_scale[c];
    }
  }
  p.W.resize(static_cast<size_t>(out * in));
  for (float& v : p.W) v = 0.05f * normal(rng);
  return p;
}

std::vector<double> hessian_of(const Problem& p, int threads = 0) {
  HessianAccumulator acc(p.in, threads);
  EXPECT_TRUE(acc.add(p.X.data(), p.rows).ok());
  StatusOr<std::vector<double>> h = acc.hessian();
  EXPECT_TRUE(h.ok());
  return h.ok() ? *h : std::vector<double>();
}

/// Σ over calibration rows and outputs of (x · (w − ŵ))², divided by the row count.
double output_mse(const Problem& p, const std::vector<float>& Wq) {
  double total = 0;
  for (int64_t t = 0; t < p.rows; ++t) {
    for (int64_t o = 0; o < p.out; ++o) {
      double d = 0;
      for (int64_t c = 0; c < p.in; ++c) {
        d += static_cast<double>(p.X[t * p.in + c]) *
             (static_cast<double>(p.W[o * p.in + c]) - Wq[o * p.in + c]);
      }
      total += d * d;
    }
  }
  return total / static_cast<double>(p.rows);
}

bool same_result(const GptqResult& a, const GptqResult& b) {
  return a.codes == b.codes && a.scales.size() == b.scales.size() &&
         std::memcmp(a.scales.data(), b.scales.data(), a.scales.size() * sizeof(float)) == 0 &&
         std::memcmp(&a.proxy_loss, &b.proxy_loss, sizeof(double)) == 0 && a.damp == b.damp &&
         a.damp_retries == b.damp_retries && a.dead_columns == b.dead_columns;
}

// ---------------------------------------------------------------------------

struct MseCase {
  int bits;
  bool act_order;
  int64_t group_size;
  bool mse_clip;
};

class GptqVsRtn : public ::testing::TestWithParam<MseCase> {};

TEST_P(GptqVsRtn, ReducesCalibrationOutputError) {
  const MseCase& c = GetParam();
  const Problem p = make_problem(64, 128, 512, 1234);
  GptqOptions o;
  o.bits = c.bits;
  o.act_order = c.act_order;
  o.group_size = c.group_size;
  o.mse_clip = c.mse_clip;
  QBC_ASSERT_OK(rtn_quantize(p.W, p.out, p.in, o));
  const GptqResult rtn = *rtn_quantize(p.W, p.out, p.in, o);
  StatusOr<GptqResult> g = gptq_quantize(p.W, p.out, p.in, hessian_of(p), o);
  QBC_ASSERT_OK(g);
  const double mse_rtn = output_mse(p, dequantize(rtn));
  const double mse_gptq = output_mse(p, dequantize(*g));
  std::printf(
      "bits %d act_order %d group %lld mse_clip %d: output MSE rtn %.6g gptq %.6g ratio %.3f"
      " (proxy loss %.6g)\n",
      c.bits, c.act_order, static_cast<long long>(c.group_size), c.mse_clip, mse_rtn, mse_gptq,
      mse_gptq / mse_rtn, g->proxy_loss);
  EXPECT_LT(mse_gptq, 0.8 * mse_rtn);
  // The loss GPTQ reports is the calibration output error plus the damping term.
  EXPECT_GE(g->proxy_loss, mse_gptq * (1 - 1e-9));
  EXPECT_LT(g->proxy_loss, 1.5 * mse_gptq);
}

std::string name_of(const MseCase& c) {
  return "w" + std::to_string(c.bits) + (c.act_order ? "_actorder" : "") + "_g" +
         std::to_string(c.group_size) + (c.mse_clip ? "_mse" : "");
}
// Printers keep the padding bytes of the case structs out of the test listing.
void PrintTo(const MseCase& c, std::ostream* os) { *os << name_of(c); }
std::string mse_case_name(const ::testing::TestParamInfo<MseCase>& info) {
  return name_of(info.param);
}

INSTANTIATE_TEST_SUITE_P(Cases, GptqVsRtn,
                         ::testing::Values(MseCase{4, true, 0, false}, MseCase{4, false, 0, false},
                                           MseCase{8, true, 0, false}, MseCase{8, false, 0, false},
                                           MseCase{4, true, 32, false},
                                           MseCase{4, false, 32, false},
                                           MseCase{8, true, 32, false}, MseCase{4, true, 0, true},
                                           MseCase{4, true, 32, true}),
                         mse_case_name);

/// ½ Σ_rows δᵀ(H' + λI)δ with δ = W − Ŵ (Ŵ = s·(q − z) in fp64, as GPTQ computes it), dead
/// columns of W zeroed and their H'_ii = 1.
double damped_quadratic_form(const std::vector<float>& W, int64_t out, int64_t in,
                             const std::vector<double>& H, const GptqResult& r) {
  double total = 0;
  std::vector<double> d(static_cast<size_t>(in));
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t c = 0; c < in; ++c) {
      const bool dead = H[c * in + c] == 0;
      const double wq = static_cast<double>(r.scale(o, c)) * (r.codes[o * in + c] - r.zero(o, c));
      d[c] = (dead ? 0.0 : static_cast<double>(W[o * in + c])) - wq;
    }
    for (int64_t i = 0; i < in; ++i) {
      for (int64_t j = 0; j < in; ++j) {
        double h = H[i * in + j];
        if (i == j) h = (h == 0 ? 1.0 : h) + r.damp;
        total += d[i] * h * d[j];
      }
    }
  }
  return 0.5 * total;
}

struct ProxyCase {
  int64_t out, in, block_size, group_size;
  bool act_order;
};

class GptqProxy : public ::testing::TestWithParam<ProxyCase> {};

// Each step's loss (w − ŵ)²/(2d²) is the exact increase of the damped quadratic
// objective, so their sum equals the final objective: a check of the permutation,
// the inverse factor, the error feedback and the lazy batch updates together.
TEST_P(GptqProxy, LossEqualsDampedQuadraticForm) {
  const ProxyCase& c = GetParam();
  Problem p = make_problem(c.out, c.in, 3 * c.in, 77);
  for (int64_t t = 0; t < p.rows; ++t) p.X[t * p.in + 5] = 0;  // one dead column
  const std::vector<double> H = hessian_of(p);
  GptqOptions o;
  o.bits = 4;
  o.block_size = c.block_size;
  o.group_size = c.group_size;
  o.act_order = c.act_order;
  o.perc_damp = 0.05;
  StatusOr<GptqResult> g = gptq_quantize(p.W, p.out, p.in, H, o);
  QBC_ASSERT_OK(g);
  EXPECT_EQ(g->dead_columns, 1);
  const double form = damped_quadratic_form(p.W, p.out, p.in, H, *g);
  EXPECT_NEAR(g->proxy_loss, form, 1e-10 * form);
}

std::string name_of(const ProxyCase& c) {
  return std::to_string(c.out) + "x" + std::to_string(c.in) + "_b" + std::to_string(c.block_size) +
         "_g" + std::to_string(c.group_size) + (c.act_order ? "_actorder" : "");
}
void PrintTo(const ProxyCase& c, std::ostream* os) { *os << name_of(c); }
std::string proxy_case_name(const ::testing::TestParamInfo<ProxyCase>& info) {
  return name_of(info.param);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GptqProxy,
    ::testing::Values(ProxyCase{16, 40, 128, 0, true}, ProxyCase{16, 40, 1, 0, true},
                      ProxyCase{16, 40, 7, 8, false}, ProxyCase{9, 300, 128, 0, true},
                      ProxyCase{9, 300, 50, 64, true}, ProxyCase{130, 261, 64, 0, false}),
    proxy_case_name);

TEST(Gptq, CodesInRangeScalesNonzeroAndReconstruct) {
  const Problem p = make_problem(32, 96, 256, 5);
  for (int bits : {4, 8}) {
    for (int64_t group : {0, 32, 40}) {
      GptqOptions o;
      o.bits = bits;
      o.group_size = group;
      StatusOr<GptqResult> g = gptq_quantize(p.W, p.out, p.in, hessian_of(p), o);
      QBC_ASSERT_OK(g);
      const int64_t groups = group == 0 ? 1 : (p.in + group - 1) / group;
      ASSERT_EQ(g->groups(), groups);
      ASSERT_EQ(g->scales.size(), static_cast<size_t>(p.out * groups));
      ASSERT_EQ(g->codes.size(), p.W.size());
      const int lo = -(1 << (bits - 1)), hi = (1 << (bits - 1)) - 1;
      for (int8_t q : g->codes) {
        EXPECT_GE(q, lo);
        EXPECT_LE(q, hi);
      }
      for (float s : g->scales) EXPECT_GE(std::fabs(s), 1e-8f);
      const std::vector<float> wq = dequantize(*g);
      double err = 0, norm = 0;
      for (size_t k = 0; k < wq.size(); ++k) {
        EXPECT_EQ(wq[k], static_cast<float>(static_cast<double>(g->scale(k / p.in, k % p.in)) *
                                            g->codes[k]));
        err += (wq[k] - p.W[k]) * (wq[k] - p.W[k]);
        norm += p.W[k] * p.W[k];
      }
      EXPECT_LT(std::sqrt(err / norm), bits == 4 ? 0.25 : 0.02) << "bits " << bits;
    }
  }
}

// With uncorrelated inputs (diagonal H) there is no error to feed back: GPTQ is RTN.
TEST(Gptq, DiagonalHessianGivesRtn) {
  const Problem p = make_problem(24, 150, 4, 13);
  std::vector<double> H(static_cast<size_t>(p.in * p.in), 0.0);
  for (int64_t i = 0; i < p.in; ++i) H[i * p.in + i] = 0.5 + (i * 37 % 11);
  for (int64_t group : {0, 16}) {
    GptqOptions o;
    o.bits = 4;
    o.group_size = group;
    StatusOr<GptqResult> g = gptq_quantize(p.W, p.out, p.in, H, o);
    QBC_ASSERT_OK(g);
    const GptqResult r = *rtn_quantize(p.W, p.out, p.in, o);
    EXPECT_EQ(g->codes, r.codes);
    EXPECT_EQ(g->scales, r.scales);
  }
}

// RTN is exactly the rule of docs/numerics.md: of the two scales that put the row's
// extreme e on +-qmax (|e| / 7) or on the long end -8 (-e / 8), the one with the smaller
// squared error, the absmax scale on ties.
TEST(Rtn, FollowsTheNumericsRule) {
  const Problem p = make_problem(64, 50, 4, 9);
  GptqOptions o;
  o.bits = 4;
  StatusOr<GptqResult> r = rtn_quantize(p.W, p.out, p.in, o);
  QBC_ASSERT_OK(r);
  auto code = [](double w, float s) {
    return std::clamp(std::nearbyint(w / static_cast<double>(s)), -8.0, 7.0);
  };
  auto sq_error = [&](int64_t row, float s) {
    double e = 0;
    for (int64_t c = 0; c < p.in; ++c) {
      const double w = p.W[row * p.in + c], d = static_cast<double>(s) * code(w, s) - w;
      e += d * d;
    }
    return e;
  };
  int long_end = 0, negative = 0;
  for (int64_t row = 0; row < p.out; ++row) {
    float e = 0;
    for (int64_t c = 0; c < p.in; ++c) {
      if (std::fabs(p.W[row * p.in + c]) > std::fabs(e)) e = p.W[row * p.in + c];
    }
    const float s_abs = std::max(std::fabs(e) / 7.0f, 1e-8f);
    const float s_long = std::copysign(std::max(std::fabs(e) / 8.0f, 1e-8f), -e);
    const float s = sq_error(row, s_long) < sq_error(row, s_abs) ? s_long : s_abs;
    ASSERT_EQ(r->scales[row], s) << "row " << row;
    long_end += s == s_long;
    negative += s < 0;
    for (int64_t c = 0; c < p.in; ++c) {
      const double w = p.W[row * p.in + c];
      EXPECT_EQ(r->codes[row * p.in + c], static_cast<int8_t>(code(w, s)));
    }
    if (s == s_long) {
      EXPECT_EQ(code(e, s), -8.0);  // the extreme sits on the long end
    }
  }
  // Gaussian rows: both rules win on some rows, and a positive extreme gives s < 0.
  EXPECT_GT(long_end, 0);
  EXPECT_LT(long_end, p.out);
  EXPECT_GT(negative, 0);
}

// Using the long end never makes a row worse and, over many rows, lowers the error:
// at 4 bits it uses 16 codes instead of 15.
TEST(Rtn, LongEndLowersTheWeightError) {
  const Problem p = make_problem(256, 32, 4, 10);
  GptqOptions o;
  o.bits = 4;
  const GptqResult r = *rtn_quantize(p.W, p.out, p.in, o);
  const std::vector<float> wr = dequantize(r);
  double total_rule = 0, total_abs = 0;
  for (int64_t row = 0; row < p.out; ++row) {
    float amax = 0;
    for (int64_t c = 0; c < p.in; ++c) amax = std::max(amax, std::fabs(p.W[row * p.in + c]));
    const double s = std::max(amax / 7.0f, 1e-8f);
    double e_rule = 0, e_abs = 0;
    for (int64_t c = 0; c < p.in; ++c) {
      const double w = p.W[row * p.in + c];
      const double da = s * std::clamp(std::nearbyint(w / s), -8.0, 7.0) - w;
      const double dr = static_cast<double>(wr[row * p.in + c]) - w;
      e_abs += da * da;
      e_rule += dr * dr;
    }
    EXPECT_LE(e_rule, e_abs * (1 + 1e-5)) << "row " << row;  // Ŵ is rounded to fp32
    total_rule += e_rule;
    total_abs += e_abs;
  }
  EXPECT_LT(total_rule, 0.95 * total_abs);
}

// Zero points: the affine rule of docs/numerics.md, per group; codes and zeros in the
// signed code range, ŵ = s·(q − z).
TEST(Rtn, ZeroPointFollowsTheAffineRule) {
  Problem p = make_problem(32, 64, 4, 12);
  for (int64_t row = 0; row < p.out; row += 2) {  // every other row skewed: all weights >= -0.01
    for (int64_t c = 0; c < p.in; ++c) p.W[row * p.in + c] = std::fabs(p.W[row * p.in + c]) - 0.01f;
  }
  GptqOptions o;
  o.bits = 4;
  o.group_size = 32;
  o.zero_point = true;
  const GptqResult r = *rtn_quantize(p.W, p.out, p.in, o);
  ASSERT_EQ(r.zeros.size(), r.scales.size());
  GptqOptions sym = o;
  sym.zero_point = false;
  const GptqResult rs = *rtn_quantize(p.W, p.out, p.in, sym);
  EXPECT_TRUE(rs.zeros.empty());
  const std::vector<float> wa = dequantize(r), ws = dequantize(rs);
  double err_a = 0, err_s = 0;
  for (int64_t row = 0; row < p.out; ++row) {
    for (int64_t g = 0; g < 2; ++g) {
      double lo = 0, hi = 0;
      for (int64_t c = 32 * g; c < 32 * (g + 1); ++c) {
        lo = std::min(lo, static_cast<double>(p.W[row * p.in + c]));
        hi = std::max(hi, static_cast<double>(p.W[row * p.in + c]));
      }
      // 4-bit groups store fp16 scales (docs/numerics.md, "Compact grouped weights").
      const float s = numerics::round_fp16(std::max(static_cast<float>((hi - lo) / 15.0), 1e-8f));
      const double z = std::clamp(std::nearbyint(-lo / s), 0.0, 15.0) - 8.0;
      ASSERT_EQ(r.scales[row * 2 + g], s) << row << "," << g;
      ASSERT_EQ(r.zeros[row * 2 + g], static_cast<int8_t>(z)) << row << "," << g;
      for (int64_t c = 32 * g; c < 32 * (g + 1); ++c) {
        const int64_t k = row * p.in + c;
        const double q = std::clamp(std::nearbyint(p.W[k] / s) + z, -8.0, 7.0);
        ASSERT_EQ(r.codes[k], static_cast<int8_t>(q));
        ASSERT_EQ(wa[k], static_cast<float>(static_cast<double>(s) * (q - z)));
        err_a += (wa[k] - p.W[k]) * (wa[k] - p.W[k]);
        err_s += (ws[k] - p.W[k]) * (ws[k] - p.W[k]);
      }
    }
  }
  EXPECT_LT(err_a, 0.8 * err_s);  // the skewed rows make the symmetric grid waste half its codes
}

// GPTQ with zero points: codes and zeros in range, and a lower output error than
// symmetric GPTQ on rows whose weights are skewed.
TEST(Gptq, ZeroPointsLowerTheOutputErrorOnSkewedRows) {
  Problem p = make_problem(32, 64, 512, 13);
  for (float& w : p.W) w = std::fabs(w) + 0.02f;
  GptqOptions o;
  o.bits = 4;
  o.group_size = 32;
  o.zero_point = true;
  StatusOr<GptqResult> a = gptq_quantize(p.W, p.out, p.in, hessian_of(p), o);
  QBC_ASSERT_OK(a);
  o.zero_point = false;
  StatusOr<GptqResult> b = gptq_quantize(p.W, p.out, p.in, hessian_of(p), o);
  QBC_ASSERT_OK(b);
  ASSERT_EQ(a->zeros.size(), a->scales.size());
  for (int8_t z : a->zeros) {
    EXPECT_GE(z, -8);
    EXPECT_LE(z, 7);
  }
  for (int8_t q : a->codes) {
    EXPECT_GE(q, -8);
    EXPECT_LE(q, 7);
  }
  EXPECT_LT(output_mse(p, dequantize(*a)), 0.7 * output_mse(p, dequantize(*b)));
}

// The MSE grid search never does worse than absmax on its own objective.
TEST(Rtn, MseClipLowersTheWeightError) {
  const Problem p = make_problem(16, 64, 4, 11);
  GptqOptions plain, clip;
  plain.bits = clip.bits = 4;
  clip.mse_clip = true;
  const GptqResult a = *rtn_quantize(p.W, p.out, p.in, plain);
  const GptqResult b = *rtn_quantize(p.W, p.out, p.in, clip);
  const std::vector<float> wa = dequantize(a), wb = dequantize(b);
  int shrunk = 0;
  for (int64_t row = 0; row < p.out; ++row) {
    double ea = 0, eb = 0;
    for (int64_t c = 0; c < p.in; ++c) {
      const int64_t k = row * p.in + c;
      ea += std::pow(std::fabs(static_cast<double>(wa[k]) - p.W[k]), 2.4);
      eb += std::pow(std::fabs(static_cast<double>(wb[k]) - p.W[k]), 2.4);
    }
    EXPECT_LE(eb, ea * (1 + 1e-6)) << "row " << row;
    shrunk += std::fabs(b.scales[row]) < std::fabs(a.scales[row]);
  }
  EXPECT_GT(shrunk, 0);
}

// ---------------------------------------------------------------------------
// Singular and broken Hessians.

TEST(Gptq, SingularHessianWorks) {
  Problem p = make_problem(16, 64, 256, 21);
  for (int64_t t = 0; t < p.rows; ++t) {
    p.X[t * p.in + 6] = p.X[t * p.in + 5];  // duplicated feature
    p.X[t * p.in + 7] = 0;                  // dead feature
    p.X[t * p.in + 40] = 0;
  }
  GptqOptions o;
  o.bits = 4;
  StatusOr<GptqResult> g = gptq_quantize(p.W, p.out, p.in, hessian_of(p), o);
  QBC_ASSERT_OK(g);
  EXPECT_EQ(g->dead_columns, 2);
  EXPECT_EQ(g->damp_retries, 0);
  for (int64_t row = 0; row < p.out; ++row) {
    EXPECT_EQ(g->codes[row * p.in + 7], 0);
    EXPECT_EQ(g->codes[row * p.in + 40], 0);
  }
  // Fewer calibration rows than features: H has rank 20 of 64.
  Problem few = make_problem(16, 64, 20, 22);
  StatusOr<GptqResult> f = gptq_quantize(few.W, few.out, few.in, hessian_of(few), o);
  QBC_ASSERT_OK(f);
  EXPECT_LT(output_mse(few, dequantize(*f)),
            output_mse(few, dequantize(*rtn_quantize(few.W, 16, 64, o))));
  // An all-zero Hessian: every column is dead.
  StatusOr<GptqResult> z =
      gptq_quantize(few.W, few.out, few.in, std::vector<double>(64 * 64, 0.0), o);
  QBC_ASSERT_OK(z);
  EXPECT_EQ(z->dead_columns, 64);
  for (int8_t q : z->codes) EXPECT_EQ(q, 0);
}

TEST(Gptq, IndefiniteHessianRetriesDamping) {
  // Eigenvalues −2 and 4: λ = 0.01, 0.1 and 1 fail, 10 works.
  const std::vector<double> H = {1, 3, 3, 1};
  const std::vector<float> W = {0.3f, -0.2f, 0.1f, 0.05f};
  GptqOptions o;
  o.bits = 4;
  StatusOr<GptqResult> g = gptq_quantize(W, 2, 2, H, o);
  QBC_ASSERT_OK(g);
  EXPECT_EQ(g->damp_retries, 3);
  EXPECT_NEAR(g->damp, 10.0, 1e-9);
  EXPECT_NEAR(g->damp_fraction, 10.0, 1e-9);

  o.max_damp_retries = 2;
  g = gptq_quantize(W, 2, 2, H, o);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), Code::kFailedPrecondition);
  EXPECT_TRUE(testing::contains(g.status().message(), "Cholesky")) << g.status().message();
  EXPECT_TRUE(testing::contains(g.status().message(), "not positive semi-definite"));
}

TEST(Gptq, BrokenInputsAreErrors) {
  const Problem p = make_problem(4, 8, 32, 3);
  std::vector<double> H = hessian_of(p);
  GptqOptions o;
  o.bits = 4;
  auto message = [&](const std::vector<float>& W, std::vector<double> h, const GptqOptions& opt) {
    StatusOr<GptqResult> g = gptq_quantize(W, 4, 8, std::move(h), opt);
    EXPECT_FALSE(g.ok());
    return g.ok() ? std::string() : g.status().message();
  };
  std::vector<double> nan_h = H;
  nan_h[2 * 8 + 5] = std::nan("");
  const std::string m = message(p.W, nan_h, o);
  EXPECT_TRUE(testing::contains(m, "Hessian entry (2, 5) is not finite")) << m;
  std::vector<double> neg = H;
  neg[3 * 8 + 3] = -1;
  EXPECT_TRUE(testing::contains(message(p.W, neg, o), "diagonal entry 3 is negative"));
  EXPECT_TRUE(
      testing::contains(message(p.W, std::vector<double>(10), o), "Hessian has 10 entries"));
  std::vector<float> w = p.W;
  w[9] = INFINITY;
  EXPECT_TRUE(testing::contains(message(w, H, o), "weight (1, 1) is not finite"));
  GptqOptions bad = o;
  bad.perc_damp = 0;
  EXPECT_TRUE(testing::contains(message(p.W, H, bad), "perc_damp"));
  bad = o;
  bad.bits = 9;
  EXPECT_TRUE(testing::contains(message(p.W, H, bad), "bits = 9"));
  bad = o;
  bad.block_size = 0;
  EXPECT_TRUE(testing::contains(message(p.W, H, bad), "block_size"));
}

// ---------------------------------------------------------------------------
// Coordinate-descent refinement (refine_sweeps).

struct RefineCase {
  int64_t group_size;
  bool zero_point;
};

class GptqRefine : public ::testing::TestWithParam<RefineCase> {};

// The refined codes keep the sweep's scales, lower the damped quadratic form that
// proxy_loss reports (and equal it), lower the calibration output error, and end at a
// point where no single code step of ±1 within the range lowers the form further.
TEST_P(GptqRefine, LowersTheProxyLossToALocalMinimum) {
  const RefineCase& c = GetParam();
  Problem p = make_problem(24, 96, 300, 5);
  for (int64_t t = 0; t < p.rows; ++t) p.X[t * p.in + 7] = 0;  // one dead column
  const std::vector<double> H = hessian_of(p);
  GptqOptions o;
  o.bits = 4;
  o.group_size = c.group_size;
  o.zero_point = c.zero_point;
  o.mse_clip = true;
  o.block_size = 32;
  StatusOr<GptqResult> plain = gptq_quantize(p.W, p.out, p.in, H, o);
  QBC_ASSERT_OK(plain);
  o.refine_sweeps = 100;
  StatusOr<GptqResult> g = gptq_quantize(p.W, p.out, p.in, H, o);
  QBC_ASSERT_OK(g);
  EXPECT_EQ(plain->refined_codes, 0);
  EXPECT_EQ(plain->sweep_proxy_loss, plain->proxy_loss);
  EXPECT_EQ(g->sweep_proxy_loss, plain->proxy_loss);
  EXPECT_TRUE(g->scales == plain->scales && g->zeros == plain->zeros);
  EXPECT_GT(g->refined_codes, 0);
  EXPECT_LT(g->proxy_loss, plain->proxy_loss);
  const double form = damped_quadratic_form(p.W, p.out, p.in, H, *g);
  EXPECT_NEAR(g->proxy_loss, form, 1e-10 * form);
  EXPECT_LT(output_mse(p, dequantize(*g)), output_mse(p, dequantize(*plain)));
  std::printf("group %lld zero point %d: proxy loss %.6g -> %.6g (%lld codes moved)\n",
              static_cast<long long>(c.group_size), c.zero_point, plain->proxy_loss, g->proxy_loss,
              static_cast<long long>(g->refined_codes));

  const int qm = 7;
  for (int8_t code : g->codes) {
    ASSERT_GE(code, -qm - 1);
    ASSERT_LE(code, qm);
  }
  // Local minimum: every ±1 step of every live code, scored on the full form.
  GptqResult probe = *g;
  for (int64_t row = 0; row < p.out; row += 5) {
    for (int64_t col = 0; col < p.in; ++col) {
      if (col == 7) continue;
      for (int step : {-1, 1}) {
        const int to = g->codes[row * p.in + col] + step;
        if (to < -qm - 1 || to > qm) continue;
        probe.codes[row * p.in + col] = static_cast<int8_t>(to);
        EXPECT_GE(damped_quadratic_form(p.W, p.out, p.in, H, probe), form * (1 - 1e-12))
            << "row " << row << " col " << col << " step " << step;
        probe.codes[row * p.in + col] = g->codes[row * p.in + col];
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, GptqRefine,
                         ::testing::Values(RefineCase{0, false}, RefineCase{32, false},
                                           RefineCase{32, true}),
                         [](const ::testing::TestParamInfo<RefineCase>& i) {
                           return "g" + std::to_string(i.param.group_size) +
                                  (i.param.zero_point ? "_zp" : "");
                         });

TEST(GptqRefine, OneSweepIsBetweenNoneAndConvergence) {
  const Problem p = make_problem(16, 64, 200, 9);
  const std::vector<double> H = hessian_of(p);
  GptqOptions o;
  o.bits = 4;
  o.group_size = 32;
  o.refine_sweeps = 1;
  const GptqResult one = *gptq_quantize(p.W, p.out, p.in, H, o);
  o.refine_sweeps = 100;
  const GptqResult many = *gptq_quantize(p.W, p.out, p.in, H, o);
  EXPECT_LE(one.proxy_loss, one.sweep_proxy_loss);
  EXPECT_LE(many.proxy_loss, one.proxy_loss);
  EXPECT_LE(one.refined_codes, many.refined_codes);
  o.refine_sweeps = -1;
  StatusOr<GptqResult> bad = gptq_quantize(p.W, p.out, p.in, H, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(testing::contains(bad.status().message(), "refine_sweeps = -1"));
}

// ---------------------------------------------------------------------------
// Determinism.

TEST(Gptq, DeterministicAcrossRunsAndThreadCounts) {
  // Large enough for several work items in every parallel loop.
  const Problem p = make_problem(300, 300, 400, 42);
  const std::vector<double> H = hessian_of(p);
  for (int64_t group : {0, 64}) {
    GptqOptions o;
    o.bits = 4;
    o.group_size = group;
    o.mse_clip = group > 0;
    o.refine_sweeps = group > 0 ? 3 : 0;
    o.num_threads = 1;
    const GptqResult one = *gptq_quantize(p.W, p.out, p.in, H, o);
    const GptqResult again = *gptq_quantize(p.W, p.out, p.in, H, o);
    EXPECT_TRUE(same_result(one, again));
    for (int threads : {2, 3, 0}) {
      o.num_threads = threads;
      EXPECT_TRUE(same_result(one, *gptq_quantize(p.W, p.out, p.in, H, o))) << threads;
    }
  }
}

// One factor for every linear of a group (gptq_factor): each linear's result is the one
// gptq_quantize(W, H) gives, bit for bit, for other bits and groups too, with refinement and
// a dead input; the factor holds what GPTQ sweeps with (U upper, its lower part +0, UᵀU =
// (P H Pᵀ + λI)⁻¹ in act order); a factor of another size or without refine_sweeps' A is
// refused.
TEST(GptqFactor, ServesEveryLinearOfTheGroupWithGptqsBits) {
  Problem p = make_problem(40, 48, 300, 17);
  for (int64_t t = 0; t < p.rows; ++t) p.X[t * p.in + 5] = 0.0f;  // a dead input
  const std::vector<double> H = hessian_of(p);
  GptqOptions o;
  o.mse_clip = true;
  o.zero_point = true;
  o.refine_sweeps = 2;
  StatusOr<GptqFactor> f = gptq_factor(H, o);
  QBC_ASSERT_OK(f);
  const int64_t n = p.in;
  EXPECT_EQ(f->n, n);
  EXPECT_TRUE(f->dead[5]);
  EXPECT_EQ(std::count(f->dead.begin(), f->dead.end(), true), 1);
  EXPECT_NE(f->perm[0], 0);  // act order moved the outlier features first
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < i; ++j) EXPECT_EQ(f->U[i * n + j], 0.0);
  }
  // UᵀU (P H Pᵀ + λI) = I, with the dead input at a unit diagonal.
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double v = 0;
      for (int64_t k = 0; k < n; ++k) {
        double uu = 0;
        for (int64_t r = 0; r <= std::min(i, k); ++r) uu += f->U[r * n + i] * f->U[r * n + k];
        const int64_t a = f->perm[k], b = f->perm[j];
        double h = H[a * n + b];
        if (a == b) h = (f->dead[a] ? 1.0 : h) + f->lambda;
        v += uu * h;
      }
      worst = std::max(worst, std::fabs(v - (i == j ? 1.0 : 0.0)));
    }
  }
  EXPECT_LT(worst, 1e-9);
  for (const auto& [bits, group] : {std::pair<int, int64_t>{4, 16}, {8, 0}, {4, 0}}) {
    GptqOptions ol = o;
    ol.bits = bits;
    ol.group_size = group;
    StatusOr<GptqResult> shared = gptq_quantize(p.W, p.out, p.in, *f, ol);
    StatusOr<GptqResult> alone = gptq_quantize(p.W, p.out, p.in, H, ol);
    QBC_ASSERT_OK(shared);
    QBC_ASSERT_OK(alone);
    EXPECT_TRUE(same_result(*shared, *alone)) << bits << " bits, group " << group;
    EXPECT_EQ(shared->zeros, alone->zeros);
    EXPECT_EQ(shared->refined_codes, alone->refined_codes);
  }
  EXPECT_FALSE(gptq_quantize(std::vector<float>(p.out * (p.in - 1), 0.1f), p.out, p.in - 1, *f, o)
                   .ok());
  GptqOptions plain = o;
  plain.refine_sweeps = 0;
  StatusOr<GptqFactor> f0 = gptq_factor(H, plain);
  QBC_ASSERT_OK(f0);
  EXPECT_TRUE(f0->A.empty());
  EXPECT_FALSE(gptq_quantize(p.W, p.out, p.in, *f0, o).ok());  // refine needs A
  EXPECT_FALSE(gptq_factor(std::vector<double>(7, 1.0), o).ok());  // not square
}

// ---------------------------------------------------------------------------
// Hessian accumulation.

TEST(HessianAccumulator, EqualsNaiveSumBitForBit) {
  const Problem p = make_problem(1, 70, 600, 8);  // 600 rows: crosses the 256-row tiles
  const int64_t n = p.in;
  std::vector<double> sum(static_cast<size_t>(n * n), 0.0);
  for (int64_t t = 0; t < p.rows; ++t) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        sum[i * n + j] += static_cast<double>(p.X[t * n + i]) * static_cast<double>(p.X[t * n + j]);
      }
    }
  }
  const double factor = 2.0 / static_cast<double>(p.rows);
  for (double& v : sum) v *= factor;
  for (int threads : {1, 3}) {
    HessianAccumulator acc(n, threads);
    QBC_ASSERT_OK(acc.add(p.X.data(), 1));
    QBC_ASSERT_OK(acc.add(p.X.data() + n, 255));
    QBC_ASSERT_OK(acc.add(p.X.data() + 256 * n, p.rows - 256));
    EXPECT_EQ(acc.samples(), p.rows);
    StatusOr<std::vector<double>> h = acc.hessian();
    QBC_ASSERT_OK(h);
    EXPECT_TRUE(*h == sum) << "threads " << threads;
  }
}

TEST(HessianAccumulator, Errors) {
  HessianAccumulator acc(3);
  EXPECT_FALSE(acc.hessian().ok());
  const float x[6] = {1, 2, 3, 4, NAN, 6};
  const Status s = acc.add(x, 2);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(testing::contains(s.message(), "row 1 feature 1 is not finite")) << s.message();
  EXPECT_EQ(acc.samples(), 0);
}

}  // namespace
}  // namespace qbc::quant
