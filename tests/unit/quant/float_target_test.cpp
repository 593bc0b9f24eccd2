// Tests of the float-target correction (include/qbc/quant/float_target.h): no change
// when the quantized model's inputs equal the float model's, the ridge solution when
// they differ (it lowers ||W X_f − W' X_q|| and approaches least squares as the damping
// goes to 0), dead columns, and determinism across thread counts.
#include "qbc/quant/float_target.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "qbc/quant/gptq.h"
#include "test_support.h"

namespace qbc::quant {
namespace {

struct Data {
  int64_t out = 0, in = 0, rows = 0;
  std::vector<float> W, Xf, Xq;  // [out, in], [rows, in], [rows, in]
};

/// X_q = X_f + a feature-mixing error (what earlier quantized layers leave).
Data make_data(int64_t out, int64_t in, int64_t rows, float err, uint32_t seed) {
  Data d{out, in, rows, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  d.W.resize(static_cast<size_t>(out * in));
  for (float& v : d.W) v = 0.1f * n(rng);
  std::vector<float> mix(static_cast<size_t>(in * in));
  for (float& v : mix) v = err * n(rng) / std::sqrt(static_cast<float>(in));
  d.Xf.resize(static_cast<size_t>(rows * in));
  d.Xq.resize(d.Xf.size());
  for (float& v : d.Xf) v = n(rng);
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t j = 0; j < in; ++j) {
      double acc = d.Xf[t * in + j];
      for (int64_t k = 0; k < in; ++k) acc += d.Xf[t * in + k] * mix[k * in + j];
      d.Xq[t * in + j] = static_cast<float>(acc + 0.01 * n(rng));
    }
  }
  return d;
}

/// A [rows, n] matrix of standard normal values.
std::vector<double> normal_matrix(int64_t rows, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> m(static_cast<size_t>(rows * n));
  for (double& v : m) v = nd(rng);
  return m;
}

std::vector<double> hessian(const Data& d, const std::vector<float>& X) {
  HessianAccumulator acc(d.in);
  EXPECT_TRUE(acc.add(X.data(), d.rows).ok());
  return *acc.hessian();
}

std::vector<double> cross(const Data& d, int threads = 0) {
  CrossAccumulator acc(d.in, threads);
  EXPECT_TRUE(acc.add(d.Xf.data(), d.Xq.data(), d.rows).ok());
  return *acc.cross();
}

/// W' = W + W·M, M from H and C.
StatusOr<std::vector<float>> float_target_weights(const std::vector<float>& W, int64_t out,
                                                  int64_t in, const std::vector<double>& H,
                                                  const std::vector<double>& C, double damp,
                                                  int threads = 0) {
  QBC_ASSIGN_OR_RETURN(std::vector<double> M, float_target_correction(H, C, damp, threads));
  return apply_float_target(W, out, in, M, threads);
}

/// Σ_t ||W x_f,t − W' x_q,t||².
double target_error(const Data& d, const std::vector<float>& Wp) {
  double e = 0;
  for (int64_t t = 0; t < d.rows; ++t) {
    for (int64_t o = 0; o < d.out; ++o) {
      double a = 0, b = 0;
      for (int64_t i = 0; i < d.in; ++i) {
        a += static_cast<double>(d.W[o * d.in + i]) * d.Xf[t * d.in + i];
        b += static_cast<double>(Wp[o * d.in + i]) * d.Xq[t * d.in + i];
      }
      e += (a - b) * (a - b);
    }
  }
  return e;
}

TEST(CrossAccumulator, EqualsTheNaiveSum) {
  const Data d = make_data(2, 7, 300, 0.3f, 1);
  const std::vector<double> c = cross(d);
  for (int64_t i = 0; i < d.in; ++i) {
    for (int64_t j = 0; j < d.in; ++j) {
      double s = 0;
      for (int64_t t = 0; t < d.rows; ++t)
        s += static_cast<double>(d.Xf[t * d.in + i]) * d.Xq[t * d.in + j];
      EXPECT_NEAR(c[i * d.in + j], 2.0 * s / d.rows, 1e-9 * (1 + std::fabs(s)));
    }
  }
  CrossAccumulator empty(3);
  EXPECT_FALSE(empty.cross().ok());
  std::vector<float> bad = {1.0f, NAN, 0.0f};
  EXPECT_FALSE(empty.add(bad.data(), bad.data(), 1).ok());
}

TEST(FloatTarget, EqualInputsLeaveTheWeightsUnchanged) {
  Data d = make_data(8, 16, 200, 0.0f, 2);
  d.Xq = d.Xf;
  const std::vector<double> H = hessian(d, d.Xq);
  StatusOr<std::vector<float>> w = float_target_weights(d.W, d.out, d.in, H, cross(d), 0.01);
  QBC_ASSERT_OK(w);
  EXPECT_EQ(*w, d.W);
}

TEST(FloatTarget, MovesTheWeightsTowardsTheFloatOutputs) {
  const Data d = make_data(8, 16, 400, 0.3f, 3);
  const std::vector<double> H = hessian(d, d.Xq), C = cross(d);
  const double before = target_error(d, d.W);
  StatusOr<std::vector<float>> w = float_target_weights(d.W, d.out, d.in, H, C, 0.01);
  QBC_ASSERT_OK(w);
  const double after = target_error(d, *w);
  EXPECT_LT(after, 0.1 * before);
  // Less damping: closer to least squares, never worse on the fitted rows.
  StatusOr<std::vector<float>> w2 = float_target_weights(d.W, d.out, d.in, H, C, 1e-6);
  QBC_ASSERT_OK(w2);
  EXPECT_LE(target_error(d, *w2), after * (1 + 1e-9));
}

TEST(FloatTarget, DeadColumnsAndThreadCounts) {
  Data d = make_data(5, 12, 300, 0.3f, 4);
  for (int64_t t = 0; t < d.rows; ++t)
    d.Xq[t * d.in + 3] = 0.0f;  // column 3 never reaches the layer
  const std::vector<double> H = hessian(d, d.Xq);
  StatusOr<std::vector<float>> a = float_target_weights(d.W, d.out, d.in, H, cross(d, 1), 0.01, 1);
  StatusOr<std::vector<float>> b = float_target_weights(d.W, d.out, d.in, H, cross(d, 3), 0.01, 3);
  QBC_ASSERT_OK(a);
  QBC_ASSERT_OK(b);
  EXPECT_EQ(*a, *b);
  for (int64_t o = 0; o < d.out; ++o)
    EXPECT_EQ((*a)[o * d.in + 3], d.W[o * d.in + 3]);  // no correction there
  EXPECT_FALSE(float_target_weights(d.W, d.out, d.in + 1, H, cross(d), 0.01).ok());
  EXPECT_FALSE(float_target_correction(H, std::vector<double>(3, 0.0), 0.01).ok());
}

TEST(CrossAccumulator, TargetsOfAnotherWidth) {
  const Data d = make_data(2, 6, 250, 0.3f, 5);
  const int64_t m = 3;  // targets: the first 3 features of X_f, doubled
  std::vector<float> f(static_cast<size_t>(d.rows * m));
  for (int64_t t = 0; t < d.rows; ++t) {
    for (int64_t i = 0; i < m; ++i) f[t * m + i] = 2.0f * d.Xf[t * d.in + i];
  }
  CrossAccumulator acc(m, d.in, 2);
  QBC_ASSERT_OK(acc.add(f.data(), d.Xq.data(), d.rows));
  StatusOr<std::vector<double>> c = acc.cross();
  QBC_ASSERT_OK(c);
  ASSERT_EQ(c->size(), static_cast<size_t>(m * d.in));
  const std::vector<double> square = cross(d);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < d.in; ++j) {
      EXPECT_NEAR((*c)[i * d.in + j], 2.0 * square[i * d.in + j],
                  1e-9 * (1 + std::fabs(square[i * d.in + j])));
    }
  }
}

TEST(RidgeRightSolve, SolvesAgainstTheDampedHessian) {
  Data d = make_data(4, 9, 300, 0.3f, 6);
  for (int64_t t = 0; t < d.rows; ++t) d.Xq[t * d.in + 2] = 0.0f;  // a dead input
  const std::vector<double> H = hessian(d, d.Xq);
  const int64_t n = d.in, rows = 5;
  const std::vector<double> B = normal_matrix(rows, n, 7);
  const double damp = 0.05;
  StatusOr<std::vector<double>> X = ridge_right_solve(H, B, rows, damp, 1);
  QBC_ASSERT_OK(X);
  StatusOr<std::vector<double>> X3 = ridge_right_solve(H, B, rows, damp, 3);
  QBC_ASSERT_OK(X3);
  EXPECT_EQ(*X, *X3);
  double mean_diag = 0;  // a dead input counts with a unit diagonal (as in GPTQ)
  for (int64_t i = 0; i < n; ++i) mean_diag += H[i * n + i] == 0 ? 1.0 : H[i * n + i];
  const double lambda = damp * mean_diag / n;
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ((*X)[r * n + 2], 0.0);  // no correction through a dead input
    for (int64_t j = 0; j < n; ++j) {
      if (j == 2) continue;
      // (X (H + λI))_rj = B_rj on the live inputs.
      double v = 0;
      for (int64_t k = 0; k < n; ++k)
        v += (*X)[r * n + k] * (H[k * n + j] + (k == j ? lambda : 0.0));
      EXPECT_NEAR(v, B[r * n + j], 1e-8 * (1 + std::fabs(B[r * n + j])));
    }
  }
  EXPECT_FALSE(ridge_right_solve(H, B, rows + 1, damp).ok());
}

// RidgeSolver reads only the non-zero triangle of each factor: any column block gives the
// bits of the full products (block >= n), across block edges, with a dead input, and for a
// zero right-hand side row (every sum exactly +0, the sign the full products give);
// ridge_right_solve and float_target_correction are one factorisation and one solve.
TEST(RidgeSolver, TriangularBlocksGiveTheFullProductsBits) {
  Data d = make_data(4, 300, 900, 0.3f, 11);
  for (int64_t t = 0; t < d.rows; ++t) d.Xq[t * d.in + 7] = 0.0f;  // a dead input
  const std::vector<double> H = hessian(d, d.Xq);
  const int64_t n = d.in, rows = 6;
  std::vector<double> B = normal_matrix(rows, n, 13);
  for (int64_t j = 0; j < n; ++j) B[3 * n + j] = 0.0;  // a zero row
  const double damp = 0.02;
  StatusOr<RidgeSolver> r = RidgeSolver::factor(H, damp, 2);
  QBC_ASSERT_OK(r);
  EXPECT_EQ(r->size(), n);
  StatusOr<std::vector<double>> full = r->solve(B, rows, n);
  QBC_ASSERT_OK(full);
  for (int64_t block : {1, 37, 64, 256, 299}) {
    StatusOr<std::vector<double>> x = r->solve(B, rows, block);
    QBC_ASSERT_OK(x);
    ASSERT_EQ(x->size(), full->size());
    EXPECT_EQ(std::memcmp(x->data(), full->data(), x->size() * sizeof(double)), 0)
        << "block " << block;
  }
  for (int64_t j = 0; j < n; ++j) {
    EXPECT_EQ((*full)[3 * n + j], 0.0);
    EXPECT_FALSE(std::signbit((*full)[3 * n + j])) << j;
  }
  StatusOr<std::vector<double>> once = ridge_right_solve(H, B, rows, damp, 1);
  QBC_ASSERT_OK(once);
  EXPECT_EQ(std::memcmp(once->data(), full->data(), once->size() * sizeof(double)), 0);
  std::vector<double> C = cross(d);
  StatusOr<std::vector<double>> m1 = r->correction(H, C);
  StatusOr<std::vector<double>> m2 = float_target_correction(H, C, damp, 1);
  QBC_ASSERT_OK(m1);
  QBC_ASSERT_OK(m2);
  EXPECT_EQ(std::memcmp(m1->data(), m2->data(), m1->size() * sizeof(double)), 0);
  EXPECT_FALSE(r->solve(B, rows, 0).ok());
  EXPECT_FALSE(r->solve(B, rows + 1).ok());
  EXPECT_FALSE(RidgeSolver::factor(std::vector<double>(5, 1.0), damp).ok());
}

TEST(FloatTarget, ResidualDriftIsCancelledWhereTheInputsPredictIt) {
  // A residual writer: its output is added to a stream that already drifted by D = X_q·Gᵀ
  // (a drift its own inputs predict). W' = W + (W(C − H) + E)(H + λI)⁻¹ with
  // E = (2/N) Σ d x_qᵀ aims at W x_f + d, and gets much closer than the plain float target.
  const Data d = make_data(6, 10, 500, 0.2f, 8);
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> G(static_cast<size_t>(d.out * d.in)), D(static_cast<size_t>(d.rows * d.out));
  for (float& v : G) v = nd(rng);
  for (int64_t t = 0; t < d.rows; ++t) {
    for (int64_t o = 0; o < d.out; ++o) {
      double a = 0;
      for (int64_t i = 0; i < d.in; ++i)
        a += static_cast<double>(G[o * d.in + i]) * d.Xq[t * d.in + i];
      D[t * d.out + o] = static_cast<float>(a);
    }
  }
  const std::vector<double> H = hessian(d, d.Xq), C = cross(d);
  CrossAccumulator eacc(d.out, d.in);
  QBC_ASSERT_OK(eacc.add(D.data(), d.Xq.data(), d.rows));
  StatusOr<std::vector<double>> E = eacc.cross();
  QBC_ASSERT_OK(E);
  StatusOr<std::vector<double>> R = ridge_right_solve(H, *E, d.out, 1e-4);
  QBC_ASSERT_OK(R);
  StatusOr<std::vector<float>> plain = float_target_weights(d.W, d.out, d.in, H, C, 1e-4);
  QBC_ASSERT_OK(plain);
  std::vector<float> with_drift = *plain;
  for (size_t k = 0; k < with_drift.size(); ++k)
    with_drift[k] = static_cast<float>(with_drift[k] + (*R)[k]);
  // Σ_t ||W x_f + d − W' x_q||².
  auto err = [&](const std::vector<float>& Wp) {
    double e = 0;
    for (int64_t t = 0; t < d.rows; ++t) {
      for (int64_t o = 0; o < d.out; ++o) {
        double a = D[t * d.out + o], b = 0;
        for (int64_t i = 0; i < d.in; ++i) {
          a += static_cast<double>(d.W[o * d.in + i]) * d.Xf[t * d.in + i];
          b += static_cast<double>(Wp[o * d.in + i]) * d.Xq[t * d.in + i];
        }
        e += (a - b) * (a - b);
      }
    }
    return e;
  };
  EXPECT_LT(err(with_drift), 0.1 * err(*plain));
}

// The direct route (OutputDriftAccumulator): W + (W (C − H) + E)(H + λI)⁻¹ accumulated from the
// output drift is the correction route's W + W·M + E (H + λI)⁻¹ up to rounding, with and
// without a residual drift, with a dead input whose float signal is not zero (both routes move
// it onto the live inputs); the same bits for any thread count; shape errors refused.
TEST(OutputDriftAccumulator, EqualsTheCorrectionRoute) {
  Data d = make_data(6, 40, 400, 0.3f, 21);
  for (int64_t t = 0; t < d.rows; ++t) d.Xq[t * d.in + 5] = 0.0f;  // dead in the quantized model
  std::mt19937 rng(22);
  std::normal_distribution<float> nd(0.0f, 0.1f);
  std::vector<float> drift(static_cast<size_t>(d.rows * d.out));
  for (float& v : drift) v = nd(rng);
  const std::vector<double> H = hessian(d, d.Xq);
  const double damp = 0.01;
  StatusOr<RidgeSolver> solver = RidgeSolver::factor(H, damp);
  QBC_ASSERT_OK(solver);
  for (const bool writer : {false, true}) {
    // The correction route, as hessianQuant runs it.
    StatusOr<std::vector<double>> M = solver->correction(H, cross(d));
    QBC_ASSERT_OK(M);
    StatusOr<std::vector<float>> want = apply_float_target(d.W, d.out, d.in, *M);
    QBC_ASSERT_OK(want);
    if (writer) {
      CrossAccumulator e(d.out, d.in);
      QBC_ASSERT_OK(e.add(drift.data(), d.Xq.data(), d.rows));
      StatusOr<std::vector<double>> R = solver->solve(*e.cross(), d.out);
      QBC_ASSERT_OK(R);
      for (size_t k = 0; k < want->size(); ++k)
        (*want)[k] = static_cast<float>(static_cast<double>((*want)[k]) + (*R)[k]);
    }
    std::vector<double> G1;
    for (const int threads : {1, 3}) {
      OutputDriftAccumulator acc(d.W, d.out, d.in, threads);
      // Two add() calls: rows split anywhere give the same sums.
      const int64_t half = 150;
      QBC_ASSERT_OK(acc.add(d.Xf.data(), d.Xq.data(), writer ? drift.data() : nullptr, half));
      QBC_ASSERT_OK(acc.add(d.Xf.data() + half * d.in, d.Xq.data() + half * d.in,
                            writer ? drift.data() + half * d.out : nullptr, d.rows - half));
      EXPECT_EQ(acc.samples(), d.rows);
      StatusOr<std::vector<double>> G = acc.drift_cross();
      QBC_ASSERT_OK(G);
      if (threads == 1) {
        G1 = *G;
      } else {
        ASSERT_EQ(G->size(), G1.size());
        EXPECT_EQ(std::memcmp(G->data(), G1.data(), G1.size() * sizeof(double)), 0);
      }
    }
    StatusOr<std::vector<double>> delta = solver->solve(G1, d.out);
    QBC_ASSERT_OK(delta);
    double moved = 0;
    for (size_t k = 0; k < d.W.size(); ++k) {
      const double got = static_cast<double>(d.W[k]) + (*delta)[k];
      EXPECT_NEAR(got, (*want)[k], 2e-6 * (1 + std::fabs(got))) << "writer " << writer << " " << k;
      moved = std::max(moved, std::fabs(got - d.W[k]));
    }
    EXPECT_GT(moved, 1e-3);  // the correction is not trivially zero
    for (int64_t o = 0; o < d.out; ++o) EXPECT_EQ((*delta)[o * d.in + 5], 0.0);  // dead column
  }
  OutputDriftAccumulator empty(d.W, d.out, d.in);
  EXPECT_FALSE(empty.drift_cross().ok());
  OutputDriftAccumulator wrong(d.W, d.out + 1, d.in);
  EXPECT_FALSE(wrong.add(d.Xf.data(), d.Xq.data(), nullptr, 1).ok());
  std::vector<float> bad(d.Xf.begin(), d.Xf.begin() + d.in);
  bad[3] = NAN;
  EXPECT_FALSE(empty.add(bad.data(), d.Xq.data(), nullptr, 1).ok());
}

// Which route a group takes: the direct one for a writer with fewer outputs than inputs
// (down_proj of a Llama-3.2-1B-shaped block), the correction for wide groups (gate/up, q/k/v,
// the head).
TEST(FloatTargetCost, ChoosesTheDirectRouteForNarrowWriters) {
  const int64_t rows = 16 * 256;
  EXPECT_TRUE(float_target_cost(8192, {2048}, rows, true).direct_is_cheaper());
  EXPECT_TRUE(float_target_cost(2048, {2048}, rows, true).direct_is_cheaper());  // o_proj
  EXPECT_FALSE(float_target_cost(2048, {8192, 8192}, rows, false).direct_is_cheaper());
  EXPECT_FALSE(float_target_cost(2048, {2048, 512, 512}, rows, false).direct_is_cheaper());
  EXPECT_FALSE(float_target_cost(2048, {128256}, rows, false).direct_is_cheaper());
  const FloatTargetCost down = float_target_cost(8192, {2048}, rows, true);
  EXPECT_LT(down.direct, 0.3 * down.correction);
}

// The ridge solver of GPTQ's act-order factor (RidgeSolver::from_factor) solves the same
// system as factor(): within rounding of its solution, dead columns zero; with the identity
// order (no act order) the bits of factor(); an empty factor refused.
TEST(RidgeSolver, FromGptqsFactorSolvesTheSameSystem) {
  Data d = make_data(4, 60, 500, 0.3f, 31);
  for (int64_t t = 0; t < d.rows; ++t) d.Xq[t * d.in + 9] = 0.0f;  // a dead input
  for (int64_t t = 0; t < d.rows; ++t) d.Xq[t * d.in + 40] *= 6.0f;  // act order moves it first
  const std::vector<double> H = hessian(d, d.Xq);
  const int64_t n = d.in, rows = 5;
  const std::vector<double> B = normal_matrix(rows, n, 32);
  const double damp = 0.01;
  StatusOr<RidgeSolver> plain = RidgeSolver::factor(H, damp);
  QBC_ASSERT_OK(plain);
  StatusOr<std::vector<double>> want = plain->solve(B, rows);
  QBC_ASSERT_OK(want);
  GptqOptions o;
  o.perc_damp = damp;
  StatusOr<GptqFactor> f = gptq_factor(H, o);
  QBC_ASSERT_OK(f);
  ASSERT_NE(f->perm[0], 0);
  for (const int threads : {1, 3}) {
    StatusOr<RidgeSolver> r =
        RidgeSolver::from_factor(std::make_shared<const GptqFactor>(*f), threads);
    QBC_ASSERT_OK(r);
    StatusOr<std::vector<double>> got = r->solve(B, rows, 16);
    QBC_ASSERT_OK(got);
    for (size_t k = 0; k < got->size(); ++k)
      EXPECT_NEAR((*got)[k], (*want)[k], 1e-9 * (1 + std::fabs((*want)[k]))) << k;
    for (int64_t i = 0; i < rows; ++i) EXPECT_EQ((*got)[i * n + 9], 0.0);
  }
  o.act_order = false;
  StatusOr<GptqFactor> id = gptq_factor(H, o);
  QBC_ASSERT_OK(id);
  StatusOr<RidgeSolver> r = RidgeSolver::from_factor(std::make_shared<const GptqFactor>(*id));
  QBC_ASSERT_OK(r);
  StatusOr<std::vector<double>> same = r->solve(B, rows);
  QBC_ASSERT_OK(same);
  EXPECT_EQ(std::memcmp(same->data(), want->data(), want->size() * sizeof(double)), 0);
  EXPECT_FALSE(RidgeSolver::from_factor(nullptr).ok());
  EXPECT_FALSE(RidgeSolver::from_factor(std::make_shared<const GptqFactor>()).ok());
}

}  // namespace
}  // namespace qbc::quant
