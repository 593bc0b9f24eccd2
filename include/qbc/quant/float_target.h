// Float-target weight correction for GPTQ (hessianQuant.attributes.floatTarget).
//
// GPTQ fits Ŵ to W on the inputs X_q a linear sees in the partly quantized model. Its
// target W·X_q is not the float model's output W·X_f: the error the earlier layers left
// in X_q stays. This moves the target first. With, over N calibration rows,
//   H = (2/N) Σ x_q x_qᵀ   (the GPTQ Hessian)     C = (2/N) Σ x_f x_qᵀ
// the ridge problem  min_W' ||W X_f − W' X_q||² + λ ||W' − W||²  has the solution
//   W' = W + W·M,   M = (C − H)(H + λI)⁻¹,   λ = perc_damp · mean(diag H)
// (W' = W exactly when X_q = X_f), and GPTQ then quantizes W' with H. The idea is
// GPTAQ's asymmetric calibration (arXiv 2504.02692) applied once per linear.
//
// Numerics: fp64 throughout, fixed reduction orders, no fused multiply-adds: the result
// does not depend on the thread count. Plain C++ (no LibTorch).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "qbc/quant/gptq.h"
#include "qbc/support/status.h"

namespace qbc::quant {

/// Accumulates C = (2/N) · Σ_n f_n q_nᵀ over N row pairs (f_n, q_n) of `in` features:
/// row i of C pairs float feature i with quantized feature j. Deterministic like
/// HessianAccumulator (rows are added in the order given).
class CrossAccumulator {
 public:
  explicit CrossAccumulator(int64_t in, int num_threads = 0) : CrossAccumulator(in, in, num_threads) {}
  /// C = (2/N) · Σ f_n q_nᵀ for f_n of `f_dim` and q_n of `q_dim` features: [f_dim, q_dim].
  CrossAccumulator(int64_t f_dim, int64_t q_dim, int num_threads = 0);
  /// Adds `rows` pairs: f[rows, f_dim] (float model) and q[rows, q_dim] (quantized model).
  Status add(const float* f, const float* q, int64_t rows);
  /// The same with fp64 targets f[rows, f_dim].
  Status add(const double* f, const float* q, int64_t rows);
  int64_t samples() const { return samples_; }
  /// C as an [in, in] row-major matrix. Fails when no rows were added.
  StatusOr<std::vector<double>> cross() const;

 private:
  template <typename F>
  Status add_rows(const F* f, const float* q, int64_t rows);

  int64_t f_dim_ = 0;
  int64_t in_ = 0;
  int num_threads_ = 0;
  int64_t samples_ = 0;
  std::vector<double> sum_;
};

/// The float target of a linear without the [in, in] correction M (the "direct route", for
/// linears with fewer outputs than inputs, such as down_proj): over N row pairs of float-model
/// inputs f_n and quantized-model inputs q_n, with an optional residual drift r_n [out] (the
/// float minus the quantized residual stream a writer adds to), accumulates
///   G = (2/N) Σ_n (W (f_n − q_n) + r_n) q_nᵀ   [out, in],
/// which is W (C − H) + E; then W' = W + G (H + λI)⁻¹ (RidgeSolver::solve) is the correction
/// route's W + W·M (+ E (H + λI)⁻¹) up to rounding: W·(C − H)·(H + λI)⁻¹ associated the other
/// way. Costs 2·out·in multiply-adds a row and an out × in² solve, against the correction
/// route's in² a row (C) and in³ + out·in² (M and W·M). Memory: W transposed and G in fp64.
/// Deterministic like CrossAccumulator (W (f − q) in fixed order, any thread count).
class OutputDriftAccumulator {
 public:
  /// For W [out, in] (row-major fp32, the float weight).
  OutputDriftAccumulator(const std::vector<float>& W, int64_t out, int64_t in,
                         int num_threads = 0);
  /// Adds `rows` pairs f[rows, in], q[rows, in] and, when not null, drift[rows, out].
  Status add(const float* f, const float* q, const float* drift, int64_t rows);
  int64_t samples() const { return cross_.samples(); }
  /// G [out, in]. Fails when no rows were added.
  StatusOr<std::vector<double>> drift_cross() const { return cross_.cross(); }

 private:
  int64_t out_ = 0;
  int64_t in_ = 0;
  int num_threads_ = 1;
  std::vector<double> wt_;  // W transposed [in, out]
  CrossAccumulator cross_;
};

/// Multiply-adds of the float target of one group of linears reading the same input (`in`
/// features, `rows` calibration rows, `outs` the outputs of each linear; `writer`: its one
/// linear also gets the residual target): the correction route (C, M, W·M each, and E and
/// its solve for a writer) against the direct route (OutputDriftAccumulator's products and
/// one solve per linear). The factorisation of H + λI is common to both and not counted.
struct FloatTargetCost {
  double correction = 0;
  double direct = 0;
  bool direct_is_cheaper() const { return direct < correction; }
};
FloatTargetCost float_target_cost(int64_t in, const std::vector<int64_t>& outs, int64_t rows,
                                  bool writer);

/// (H + λI)⁻¹ applied from the right, factorised once for every right-hand side of the same
/// H: λ = perc_damp · mean(diag H), ×10 on a failed factorisation (as GPTQ); dead inputs
/// (H_ii = 0) carry nothing. solve() and correction() give the bits ridge_right_solve() and
/// float_target_correction() give (they are a factorisation and one call of these).
/// Memory: H's size twice (the factor and its transpose).
class RidgeSolver {
 public:
  static StatusOr<RidgeSolver> factor(const std::vector<double>& H, double perc_damp,
                                      int num_threads = 0);
  /// The solver of GPTQ's factor (gptq_factor(): act order P, UᵀU = (P H Pᵀ + λI)⁻¹), so
  /// one factorisation serves GPTQ and the float target: B (H + λI)⁻¹ = ((B Pᵀ) Uᵀ U) P.
  /// The same solution as factor() with that factor's λ, rounded differently unless P is the
  /// identity (then the same bits). Shares the factor; memory: its transpose.
  static StatusOr<RidgeSolver> from_factor(std::shared_ptr<const GptqFactor> factor,
                                           int num_threads = 0);
  /// B (H + λI)⁻¹ for B[rows, n] (row-major, consumed); columns of dead inputs are zero.
  /// `block`: columns per block of the two triangular products (any value >= 1 gives the
  /// same bits; n or more: full products).
  StatusOr<std::vector<double>> solve(std::vector<double> B, int64_t rows,
                                      int64_t block = 256) const;
  /// M = (C − H)(H + λI)⁻¹ [n, n] for the H factor() was given and C of its rows (consumed);
  /// columns of dead inputs are zero (a dead input's row keeps the float signal it carried,
  /// moved onto the live inputs, as the direct route does).
  StatusOr<std::vector<double>> correction(const std::vector<double>& H,
                                           std::vector<double> C) const;
  int64_t size() const { return n_; }

 private:
  int64_t n_ = 0;
  int threads_ = 1;
  bool permuted_ = false;                // the factor's order is not the identity
  std::shared_ptr<const GptqFactor> f_;  // U = chol((P H Pᵀ + λI)⁻¹, upper), P, dead inputs
  std::vector<double> Ut_;               // Uᵀ
};

/// The correction M = (C − H)(H + λI)⁻¹ [in, in] shared by every linear reading the same
/// input, from H and C [in, in] of the same rows (C is consumed as work space);
/// λ = perc_damp · mean(diag H), ×10 on a failed factorisation (as GPTQ). Columns of dead
/// inputs (H_ii = 0) are zero. Memory: about 4 more in×in fp64 matrices.
StatusOr<std::vector<double>> float_target_correction(const std::vector<double>& H, std::vector<double> C,
                                                      double perc_damp, int num_threads = 0);

/// B (H + λI)⁻¹ for B[rows, n] (row-major) and H [n, n], λ = perc_damp · mean(diag H)
/// (×10 on a failed factorisation); columns of dead inputs (H_ii = 0) are zero.
StatusOr<std::vector<double>> ridge_right_solve(const std::vector<double>& H, std::vector<double> B, int64_t rows,
                                                double perc_damp, int num_threads = 0);
/// W' = W + W · M for W[out, in] (row-major) and M from float_target_correction().
StatusOr<std::vector<float>> apply_float_target(const std::vector<float>& W, int64_t out, int64_t in,
                                                const std::vector<double>& M, int num_threads = 0);

}  // namespace qbc::quant
