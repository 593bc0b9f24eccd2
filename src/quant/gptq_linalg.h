// Private to src/quant: the fp64 linear algebra of gptq.cpp (threads, a
// deterministic GEMM, Cholesky, triangular inverse, symmetric permutation). See the
// comment at the top of gptq_linalg.cpp for the determinism guarantees.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <system_error>
#include <thread>
#include <vector>

#include "qbc/quant/gptq.h"
#include "qbc/support/status.h"

namespace qbc::quant::gptq_detail {

/// Rows of the GEMM register tile (callers align row blocks to it).
inline constexpr int64_t kMr = 4;

/// `requested` threads, or the hardware's when 0.
int resolve_threads(int requested);

/// Calls f(begin, end) for consecutive chunks of [0, n) of `chunk` items.
template <typename F>
void parallel_chunks(int64_t n, int64_t chunk, int threads, const F& f) {
  if (n <= 0) return;
  const int64_t chunks = (n + chunk - 1) / chunk;
  std::atomic<int64_t> next{0};
  auto worker = [&] {
    for (int64_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1)) {
      f(c * chunk, std::min(n, (c + 1) * chunk));
    }
  };
  std::vector<std::thread> pool;
  const int64_t extra = std::min<int64_t>(threads, chunks) - 1;
  for (int64_t t = 0; t < extra; ++t) {
    try {
      pool.emplace_back(worker);
    } catch (const std::system_error&) {
      break;  // no more threads: the calling thread does the rest
    }
  }
  worker();
  for (std::thread& t : pool) t.join();
}

/// C[i][j] += Σ_k A[i][k] · B[k][j], row-major, k in increasing order, no fused
/// multiply-adds: bit-identical however the product is split or threaded.
void gemm_acc(int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B, int64_t ldb,
              double* C, int64_t ldc);

/// Rows [t0, t0 + kt) of the row-major float (or double) matrix x[·, n], in fp64, as rows
/// (`rows`: [kt, n]) and/or transposed (`cols`: [n, kt]); a null target is skipped.
template <typename T>
void load_tile(const T* x, int64_t t0, int64_t kt, int64_t n, std::vector<double>* rows,
               std::vector<double>* cols) {
  if (rows != nullptr) rows->resize(static_cast<size_t>(kt * n));
  if (cols != nullptr) cols->resize(static_cast<size_t>(kt * n));
  for (int64_t t = 0; t < kt; ++t) {
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[(t0 + t) * n + i];
      if (rows != nullptr) (*rows)[static_cast<size_t>(t * n + i)] = v;
      if (cols != nullptr) (*cols)[static_cast<size_t>(i * kt + t)] = v;
    }
  }
}

/// Copies the lower triangle of the n×n row-major A onto its upper triangle.
void mirror_upper(double* A, int64_t n);

/// A ← Q A Qᵀ for the permutation `q` (row i of the result is row q[i]).
void permute_symmetric(std::vector<double>& A, int64_t n, const std::vector<int64_t>& q, int threads);

struct Damping {
  double lambda = 0;
  double fraction = 0;
  int retries = 0;
};

/// Replaces A (symmetric, in act order and reversed) with U = chol(H⁻¹, upper) in its
/// upper triangle, damping with retry; `orig_col` names columns in errors.
StatusOr<Damping> inverse_cholesky_upper(std::vector<double>& A, int64_t n, const GptqOptions& o,
                                         const std::vector<int64_t>& orig_col, int threads);

}  // namespace qbc::quant::gptq_detail
