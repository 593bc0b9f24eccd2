// OutputError (output_error.h).
#include "output_error.h"

#include <algorithm>

#include "gptq_linalg.h"

namespace qbc::quant {
namespace {

/// out[r] = Σ_c a[r][c]·b[r][c] for row-major [rows, cols] a and b, in index order.
void row_dots(const double* a, const double* b, int64_t rows, int64_t cols, double* out) {
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += a[r * cols + c] * b[r * cols + c];
    out[r] = sum;
  }
}

}  // namespace

OutputError::OutputError(std::vector<double> x, int64_t n, int64_t in, int threads)
    : n_(n), in_(in) {
  if (in_ <= n_ && in_ <= kGramMaxIn) {
    gram_.assign(static_cast<size_t>(in_ * in_), 0.0);
    gptq_detail::parallel_chunks(in_, 1, gptq_detail::resolve_threads(threads),
                                 [&](int64_t a, int64_t b) {
                                   for (int64_t i = a; i < b; ++i) {
                                     double* gi = gram_.data() + i * in_;
                                     for (int64_t t = 0; t < n_; ++t) {
                                       const double* xt = x.data() + t * in_;
                                       const double xi = xt[i];
                                       if (xi == 0) continue;
                                       for (int64_t j = i; j < in_; ++j) gi[j] += xi * xt[j];
                                     }
                                   }
                                 });
    for (int64_t i = 0; i < in_; ++i) {
      for (int64_t j = 0; j < i; ++j) gram_[i * in_ + j] = gram_[j * in_ + i];
    }
    return;
  }
  // X'ᵀ [in, m] for m ≤ kErrorRows evenly spaced rows.
  m_ = std::min(n_, kErrorRows);
  std::vector<double> xt(static_cast<size_t>(in_ * m_), 0.0);
  for (int64_t k = 0; k < m_; ++k) {
    const int64_t t = m_ == n_ ? k : (k * n_) / m_;
    for (int64_t i = 0; i < in_; ++i) xt[i * m_ + k] = x[t * in_ + i];
  }
  xt_ = f32_detail::PackedColumns(xt.data(), in_, m_);
}

void OutputError::errors(const double* D, int64_t rows, double* out) const {
  if (!gram_.empty()) {
    std::vector<double> T(static_cast<size_t>(rows * in_), 0.0);
    gptq_detail::gemm_acc(rows, in_, in_, D, in_, gram_.data(), in_, T.data(), in_);
    row_dots(D, T.data(), rows, in_, out);  // d_rᵀ(G d_r)
    return;
  }
  // Per calling thread: the searches call this from their row-chunk workers.
  thread_local std::vector<float> d32, y;
  d32.resize(static_cast<size_t>(rows * in_));
  for (int64_t i = 0; i < rows * in_; ++i) d32[i] = static_cast<float>(D[i]);
  const int64_t ldy = xt_.strips() * f32_detail::kStrip;
  y.resize(static_cast<size_t>(rows * ldy));
  f32_detail::products(d32.data(), rows, in_, xt_, y.data());
  for (int64_t r = 0; r < rows; ++r) {  // ||X' d_r||², the squares in fp64
    double sum = 0;
    for (int64_t j = 0; j < m_; ++j) {
      const double v = y[r * ldy + j];
      sum += v * v;
    }
    out[r] = sum;
  }
}

}  // namespace qbc::quant
