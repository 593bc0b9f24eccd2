// Float-target weight correction (include/qbc/quant/float_target.h).
//
// With U = chol((H + λI)⁻¹, upper) from the GPTQ factorisation (UᵀU = (H + λI)⁻¹), made
// once per group of linears sharing an input (RidgeSolver):
//   M = ((C − H) Uᵀ) U   [in, in]
//   R = (E Uᵀ) U         [out, in], a residual writer's
//   W' = W + W M (+ R)   per linear
// products of gemm_acc (fixed k order, no FMA), so any thread count gives the same bits.
#include "qbc/quant/float_target.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>

#include "gptq_linalg.h"

namespace qbc::quant {

using gptq_detail::gemm_acc;
using gptq_detail::inverse_cholesky_upper;
using gptq_detail::mirror_upper;
using gptq_detail::parallel_chunks;
using gptq_detail::permute_symmetric;
using gptq_detail::resolve_threads;

namespace {
constexpr int64_t kTile = 256;  // rows per rank-k update
}  // namespace

CrossAccumulator::CrossAccumulator(int64_t f_dim, int64_t q_dim, int num_threads)
    : f_dim_(std::max<int64_t>(f_dim, 0)),
      in_(std::max<int64_t>(q_dim, 0)),
      num_threads_(resolve_threads(num_threads)),
      sum_(static_cast<size_t>(f_dim_ * in_), 0.0) {}

Status CrossAccumulator::add(const float* f, const float* q, int64_t rows) {
  if (rows < 0) return invalid_argument("cross moments: negative row count ", rows);
  if (rows == 0) return ok_status();
  if (f == nullptr || q == nullptr) return invalid_argument("cross moments: null rows");
  const int64_t n = in_, m = f_dim_;
  for (int64_t k = 0; k < rows * n; ++k) {
    if (!std::isfinite(q[k])) {
      return invalid_argument("cross moments: row ", samples_ + k / n, " feature ", k % n,
                              " is not finite");
    }
  }
  for (int64_t k = 0; k < rows * m; ++k) {
    if (!std::isfinite(f[k])) {
      return invalid_argument("cross moments: row ", samples_ + k / m, " target feature ", k % m,
                              " is not finite");
    }
  }
  std::vector<double> ft, qd;  // a tile: f transposed [m, kt], q [kt, n]
  for (int64_t t0 = 0; t0 < rows; t0 += kTile) {
    const int64_t kt = std::min(kTile, rows - t0);
    gptq_detail::load_tile(f, t0, kt, m, nullptr, &ft);
    gptq_detail::load_tile(q, t0, kt, n, &qd, nullptr);
    parallel_chunks(m, 64, num_threads_, [&](int64_t a, int64_t b) {
      gemm_acc(b - a, n, kt, ft.data() + a * kt, kt, qd.data(), n, sum_.data() + a * n, n);
    });
  }
  samples_ += rows;
  return ok_status();
}

StatusOr<std::vector<double>> CrossAccumulator::cross() const {
  if (samples_ == 0) return failed_precondition("cross moments: no calibration rows were added");
  const double factor = 2.0 / static_cast<double>(samples_);
  std::vector<double> c(sum_.size());
  for (size_t k = 0; k < c.size(); ++k) c[k] = sum_[k] * factor;
  return c;
}

StatusOr<RidgeSolver> RidgeSolver::factor(const std::vector<double>& H, double perc_damp,
                                          int num_threads) {
  const int64_t n = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(H.size()))));
  if (n <= 0 || static_cast<int64_t>(H.size()) != n * n)
    return invalid_argument("ridge solve: H (", H.size(), " values) is not square");
  RidgeSolver r;
  r.n_ = n;
  r.threads_ = resolve_threads(num_threads);
  // No correction through dead inputs (H_ii = 0).
  r.dead_.assign(static_cast<size_t>(n), false);
  for (int64_t i = 0; i < n; ++i) r.dead_[i] = H[i * n + i] == 0;
  // U = chol((H + λI)⁻¹, upper) in original order: GPTQ's routine with the identity
  // act order (it wants the Hessian reversed).
  r.U_ = H;
  for (int64_t i = 0; i < n; ++i) {
    if (r.dead_[i]) r.U_[i * n + i] = 1;
  }
  std::vector<int64_t> rev(static_cast<size_t>(n));
  std::iota(rev.rbegin(), rev.rend(), 0);
  permute_symmetric(r.U_, n, rev, r.threads_);
  GptqOptions o;
  o.perc_damp = perc_damp;
  QBC_RETURN_IF_ERROR(inverse_cholesky_upper(r.U_, n, o, rev, r.threads_).status());
  r.Ut_.assign(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < i; ++j) r.U_[i * n + j] = 0;  // the strict lower part is work space
    for (int64_t j = i; j < n; ++j) r.Ut_[j * n + i] = r.U_[i * n + j];
  }
  return r;
}

StatusOr<std::vector<double>> RidgeSolver::solve(std::vector<double> B, int64_t rows,
                                                 int64_t block) const {
  const int64_t n = n_;
  if (rows < 0 || static_cast<int64_t>(B.size()) != rows * n)
    return invalid_argument("ridge solve: B (", B.size(), " values) is not [", rows, ", ", n, "]");
  if (block < 1) return invalid_argument("ridge solve: block ", block, " < 1");
  // The skipped terms below are products with exact zeros, which is an identity only for
  // finite factors (inf · 0 is NaN). Columns of dead inputs carry nothing.
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double& v = B[i * n + j];
      if (!std::isfinite(v))
        return invalid_argument("ridge solve: right-hand side (", i, ", ", j, ") is not finite (",
                                v, ")");
      if (dead_[j]) v = 0.0;
    }
  }
  // B (H + λI)⁻¹ = (B Uᵀ) U; B's buffer takes the result. Both factors are triangular, so
  // each column block reads only the k range whose terms can be non-zero (half the work of
  // full products). The sums are those of the full products, bit for bit: a skipped term is
  // a product with an exact +0 of U (±0), and each element still adds its other terms one at
  // a time in increasing k from +0 (T and B are filled with +0). In round-to-nearest a sum
  // that starts at +0 is never −0 (+0 + ±0 = +0, x + (−x) = +0), so the skipped ±0 terms
  // change nothing, first (T = B Uᵀ) or last (B = T U). Whole zero matrices are common here
  // (block 0's first inputs are the float model's: C = H, and the drift E is 0).
  std::vector<double> T(static_cast<size_t>(rows * n), 0.0);
  parallel_chunks(rows, 64, threads_, [&](int64_t a, int64_t b) {
    for (int64_t j0 = 0; j0 < n; j0 += block) {
      const int64_t jw = std::min(block, n - j0);
      gemm_acc(b - a, jw, n - j0, B.data() + a * n + j0, n, Ut_.data() + j0 * n + j0, n,
               T.data() + a * n + j0, n);
    }
  });
  std::fill(B.begin(), B.end(), 0.0);
  parallel_chunks(rows, 64, threads_, [&](int64_t a, int64_t b) {
    for (int64_t j0 = 0; j0 < n; j0 += block) {
      const int64_t j1 = std::min(j0 + block, n);
      gemm_acc(b - a, j1 - j0, j1, T.data() + a * n, n, U_.data() + j0, n, B.data() + a * n + j0,
               n);
    }
  });
  return B;
}

StatusOr<std::vector<double>> RidgeSolver::correction(const std::vector<double>& H,
                                                      std::vector<double> C) const {
  if (C.size() != H.size() || static_cast<int64_t>(H.size()) != n_ * n_) {
    return invalid_argument("float target: H (", H.size(), " values) and C (", C.size(),
                            " values) must be the same square matrix size (", n_, " x ", n_, ")");
  }
  const int64_t n = n_;
  for (size_t k = 0; k < C.size(); ++k) C[k] -= H[k];  // D = C − H
  // Rows of dead inputs carry no correction either.
  for (int64_t i = 0; i < n; ++i) {
    if (H[i * n + i] != 0) continue;
    for (int64_t j = 0; j < n; ++j) C[i * n + j] = 0.0;
  }
  return solve(std::move(C), n);
}

StatusOr<std::vector<double>> ridge_right_solve(const std::vector<double>& H, std::vector<double> B,
                                                int64_t rows, double perc_damp, int num_threads) {
  QBC_ASSIGN_OR_RETURN(const RidgeSolver r, RidgeSolver::factor(H, perc_damp, num_threads));
  return r.solve(std::move(B), rows);
}

StatusOr<std::vector<double>> float_target_correction(const std::vector<double>& H,
                                                      std::vector<double> C, double perc_damp,
                                                      int num_threads) {
  QBC_ASSIGN_OR_RETURN(const RidgeSolver r, RidgeSolver::factor(H, perc_damp, num_threads));
  return r.correction(H, std::move(C));
}

StatusOr<std::vector<float>> apply_float_target(const std::vector<float>& W, int64_t out,
                                                int64_t in, const std::vector<double>& M,
                                                int num_threads) {
  const int64_t n = in;
  if (out <= 0 || n <= 0 || static_cast<int64_t>(W.size()) != out * n) {
    return invalid_argument("float target: weight of ", W.size(), " values is not [", out, ", ", n,
                            "]");
  }
  if (static_cast<int64_t>(M.size()) != n * n) {
    return invalid_argument("float target: correction of ", M.size(), " values is not [", n, ", ",
                            n, "]");
  }
  const int threads = resolve_threads(num_threads);
  std::vector<float> r(W.size());
  std::atomic<bool> failed{false};
  parallel_chunks(out, 64, threads, [&](int64_t a, int64_t b) {
    std::vector<double> w(static_cast<size_t>((b - a) * n)),
        e(static_cast<size_t>((b - a) * n), 0.0);
    for (int64_t k = 0; k < (b - a) * n; ++k) w[k] = W[a * n + k];
    gemm_acc(b - a, n, n, w.data(), n, M.data(), n, e.data(), n);
    for (int64_t k = 0; k < (b - a) * n; ++k) {
      const double v = w[k] + e[k];
      if (!std::isfinite(v)) failed = true;
      r[a * n + k] = static_cast<float>(v);
    }
  });
  if (failed) return internal_error("float target: a corrected weight is not finite");
  return r;
}

}  // namespace qbc::quant
