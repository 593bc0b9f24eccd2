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
using gptq_detail::parallel_chunks;
using gptq_detail::resolve_threads;

namespace {
constexpr int64_t kTile = 256;  // rows per rank-k update
}  // namespace

CrossAccumulator::CrossAccumulator(int64_t f_dim, int64_t q_dim, int num_threads)
    : f_dim_(std::max<int64_t>(f_dim, 0)),
      in_(std::max<int64_t>(q_dim, 0)),
      num_threads_(resolve_threads(num_threads)),
      sum_(static_cast<size_t>(f_dim_ * in_), 0.0) {}

template <typename F>
Status CrossAccumulator::add_rows(const F* f, const float* q, int64_t rows) {
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

Status CrossAccumulator::add(const float* f, const float* q, int64_t rows) {
  return add_rows(f, q, rows);
}

Status CrossAccumulator::add(const double* f, const float* q, int64_t rows) {
  return add_rows(f, q, rows);
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
  // GPTQ's factorisation in the original order (no act order): dead inputs (H_ii = 0) at a
  // unit diagonal, λ = perc_damp · mean(diag H), ×10 on a failed factorisation.
  GptqOptions o;
  o.act_order = false;
  o.perc_damp = perc_damp;
  o.num_threads = num_threads;
  QBC_ASSIGN_OR_RETURN(GptqFactor f, gptq_factor(H, o));
  return from_factor(std::make_shared<const GptqFactor>(std::move(f)), num_threads);
}

StatusOr<RidgeSolver> RidgeSolver::from_factor(std::shared_ptr<const GptqFactor> factor,
                                               int num_threads) {
  if (factor == nullptr || factor->n <= 0 ||
      static_cast<int64_t>(factor->U.size()) != factor->n * factor->n ||
      static_cast<int64_t>(factor->perm.size()) != factor->n ||
      static_cast<int64_t>(factor->dead.size()) != factor->n)
    return invalid_argument("ridge solve: the factor is empty or mis-sized");
  RidgeSolver r;
  const int64_t n = factor->n;
  r.n_ = n;
  r.threads_ = resolve_threads(num_threads);
  for (int64_t i = 0; i < n; ++i) r.permuted_ = r.permuted_ || factor->perm[i] != i;
  r.Ut_.assign(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i; j < n; ++j) r.Ut_[j * n + i] = factor->U[i * n + j];
  }
  r.f_ = std::move(factor);
  return r;
}

StatusOr<std::vector<double>> RidgeSolver::solve(std::vector<double> B, int64_t rows,
                                                 int64_t block) const {
  const int64_t n = n_;
  if (rows < 0 || static_cast<int64_t>(B.size()) != rows * n)
    return invalid_argument("ridge solve: B (", B.size(), " values) is not [", rows, ", ", n, "]");
  if (block < 1) return invalid_argument("ridge solve: block ", block, " < 1");
  const std::vector<bool>& dead = f_->dead;
  const std::vector<int64_t>& perm = f_->perm;
  // The skipped terms below are products with exact zeros, which is an identity only for
  // finite factors (inf · 0 is NaN). Columns of dead inputs carry nothing.
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double& v = B[i * n + j];
      if (!std::isfinite(v))
        return invalid_argument("ridge solve: right-hand side (", i, ", ", j, ") is not finite (",
                                v, ")");
      if (dead[j]) v = 0.0;
    }
  }
  // In the factor's order: column i of B Pᵀ is column perm[i] of B.
  std::vector<double> row(static_cast<size_t>(permuted_ ? n : 0));
  if (permuted_) {
    for (int64_t i = 0; i < rows; ++i) {
      double* b = B.data() + i * n;
      for (int64_t j = 0; j < n; ++j) row[j] = b[perm[j]];
      std::copy(row.begin(), row.end(), b);
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
  const double* U = f_->U.data();
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
      gemm_acc(b - a, j1 - j0, j1, T.data() + a * n, n, U + j0, n, B.data() + a * n + j0, n);
    }
  });
  // Back to the original order: column perm[i] of the result is column i of (B Pᵀ)(Uᵀ U).
  if (permuted_) {
    for (int64_t i = 0; i < rows; ++i) {
      double* b = B.data() + i * n;
      for (int64_t j = 0; j < n; ++j) row[perm[j]] = b[j];
      std::copy(row.begin(), row.end(), b);
    }
  }
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
  // A dead input's row keeps what the float model sent through it (the direct route's
  // W (f − q) does too); solve() zeroes the dead columns.
  return solve(std::move(C), n);
}

OutputDriftAccumulator::OutputDriftAccumulator(const std::vector<float>& W, int64_t out,
                                               int64_t in, int num_threads)
    : out_(std::max<int64_t>(out, 0)),
      in_(std::max<int64_t>(in, 0)),
      num_threads_(resolve_threads(num_threads)),
      cross_(out_, in_, num_threads) {
  if (static_cast<int64_t>(W.size()) != out_ * in_) {
    out_ = in_ = 0;  // add() refuses
    return;
  }
  wt_.resize(W.size());
  for (int64_t o = 0; o < out_; ++o) {
    for (int64_t i = 0; i < in_; ++i) wt_[i * out_ + o] = W[o * in_ + i];
  }
}

Status OutputDriftAccumulator::add(const float* f, const float* q, const float* drift,
                                   int64_t rows) {
  if (out_ == 0 || in_ == 0) return invalid_argument("output drift: the weight is empty or mis-sized");
  if (rows < 0) return invalid_argument("output drift: negative row count ", rows);
  if (rows == 0) return ok_status();
  if (f == nullptr || q == nullptr) return invalid_argument("output drift: null rows");
  const int64_t n = in_, m = out_;
  std::vector<double> dx(static_cast<size_t>(rows * n));
  for (int64_t k = 0; k < rows * n; ++k) {
    if (!std::isfinite(f[k])) {
      return invalid_argument("output drift: row ", samples() + k / n, " float feature ", k % n,
                              " is not finite");
    }
    dx[k] = static_cast<double>(f[k]) - q[k];
  }
  // y = r + W (f − q), each element from the drift then the terms in increasing k.
  std::vector<double> y(static_cast<size_t>(rows * m), 0.0);
  if (drift != nullptr) {
    for (int64_t k = 0; k < rows * m; ++k) y[k] = drift[k];
  }
  parallel_chunks(m, 128, num_threads_, [&](int64_t a, int64_t b) {
    gemm_acc(rows, b - a, n, dx.data(), n, wt_.data() + a, m, y.data() + a, m);
  });
  return cross_.add(y.data(), q, rows);
}

FloatTargetCost float_target_cost(int64_t in, const std::vector<int64_t>& outs, int64_t rows,
                                  bool writer) {
  const double n = static_cast<double>(in), t = static_cast<double>(rows);
  FloatTargetCost c;
  c.correction = n * n * t + n * n * n;  // C, then M = (C − H)(H + λI)⁻¹ (two triangles)
  for (int64_t out : outs) {
    const double o = static_cast<double>(out);
    c.correction += o * n * n;                     // W·M
    c.direct += 2 * o * n * t + o * n * n;         // W (f − q), G, G (H + λI)⁻¹
    if (writer) c.correction += o * n * t + o * n * n;  // E and its solve
  }
  return c;
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
