// The fp64 linear algebra of GPTQ (gptq_linalg.h). All in place in the Hessian's
// buffer with O(in) extra memory; every product goes through gemm_acc(), which adds
// the terms of each output element one at a time in increasing k order without fused
// multiply-adds (qbc_quant builds with -ffp-contract=off), so splitting a product by
// rows, columns or k ranges, any thread count and any vector width (gemm_acc has an
// AVX-512 kernel and an AVX2 clone) give bit-identical results.
#include "gptq_linalg.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>

namespace qbc::quant::gptq_detail {
// ---------------------------------------------------------------------------
// Threads: work is split into chunks of independent rows, handed out
// dynamically. Which thread runs a chunk never changes what it computes.

int resolve_threads(int requested) {
  if (requested > 0) return requested;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(std::min(hw, 64u));
}

// ---------------------------------------------------------------------------
// gemm_acc: C[i][j] += Σ_k A[i][k] · B[k][j], row-major, k in increasing order.

constexpr int64_t kNr = 8;    // columns of the register tile
constexpr int64_t kNc = 256;  // columns of a B panel (kKc × kNc doubles stay in L2)
constexpr int64_t kKc = 256;

// Four doubles, element-wise arithmetic: one AVX2 register, or two SSE2 ones in the
// default clone. Spelled out because the auto-vectoriser shuffles this loop nest badly.
typedef double V4 __attribute__((vector_size(32)));

// By reference: passing V4 by value would depend on the clone's ABI (-Wpsabi).
__attribute__((always_inline)) inline void load4(V4& v, const double* p) {
  std::memcpy(&v, p, sizeof v);
}

__attribute__((always_inline)) inline void store4(double* p, const V4& v) {
  std::memcpy(p, &v, sizeof v);
}

/// C[Mr, 8] += A[Mr, K] · B[K, 8].
template <int64_t Mr>
__attribute__((always_inline)) inline void tile(int64_t K, const double* __restrict a, int64_t lda,
                                                const double* __restrict b, int64_t ldb,
                                                double* __restrict c, int64_t ldc) {
  static_assert(kNr == 8, "the tile is two V4 wide");
  V4 acc[Mr][2];
  for (int64_t r = 0; r < Mr; ++r) {
    load4(acc[r][0], c + r * ldc);
    load4(acc[r][1], c + r * ldc + 4);
  }
  for (int64_t k = 0; k < K; ++k) {
    V4 b0, b1;
    load4(b0, b + k * ldb);
    load4(b1, b + k * ldb + 4);
    for (int64_t r = 0; r < Mr; ++r) {
      const double ar = a[r * lda + k];
      const V4 av = {ar, ar, ar, ar};
      acc[r][0] += av * b0;
      acc[r][1] += av * b1;
    }
  }
  for (int64_t r = 0; r < Mr; ++r) {
    store4(c + r * ldc, acc[r][0]);
    store4(c + r * ldc + 4, acc[r][1]);
  }
}

__attribute__((always_inline)) inline void tile_edge(int64_t m, int64_t n, int64_t K,
                                                     const double* a, int64_t lda, const double* b,
                                                     int64_t ldb, double* c, int64_t ldc) {
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = c[r * ldc + j];
      for (int64_t k = 0; k < K; ++k) acc += a[r * lda + k] * b[k * ldb + j];
      c[r * ldc + j] = acc;
    }
  }
}

/// One row block: the full 8-wide strips read `bs` (strip t at bs + t·bs_step, rows
/// bs_ld apart: B itself, or the packed panel), the ragged right edge reads B.
template <int64_t Mr>
__attribute__((always_inline)) inline void row_tiles(int64_t nc, int64_t kc, const double* a,
                                                     int64_t lda, const double* bs, int64_t bs_step,
                                                     int64_t bs_ld, const double* b, int64_t ldb,
                                                     double* c, int64_t ldc) {
  const int64_t strips = nc / kNr;
  for (int64_t t = 0; t < strips; ++t) {
    tile<Mr>(kc, a, lda, bs + t * bs_step, bs_ld, c + t * kNr, ldc);
  }
  const int64_t j = strips * kNr;
  if (j < nc) tile_edge(Mr, nc - j, kc, a, lda, b + j, ldb, c + j, ldc);
}

// The packed B panel of the calling thread: strip t, row k at [(t · kc + k) · 8].
thread_local std::vector<double> t_panel;

namespace {

// The AVX-512 kernel: the same sums (each output element adds its terms one at a time in
// increasing k, a multiply then an add), eight doubles a register, two strips (16 columns)
// a register tile so that eight independent sums hide the add latency.
typedef double V8 __attribute__((vector_size(64)));

__attribute__((target("avx512f"), always_inline)) inline void load8(V8& v, const double* p) {
  std::memcpy(&v, p, sizeof v);
}

__attribute__((target("avx512f"), always_inline)) inline void store8(double* p, const V8& v) {
  std::memcpy(p, &v, sizeof v);
}

/// C[Mr, 8 · S] += A[Mr, K] · B[K, 8 · S]; strip s of B at b[s] (rows ldb apart).
template <int64_t Mr, int S>
__attribute__((target("avx512f"), always_inline)) inline void tile512(
    int64_t K, const double* __restrict a, int64_t lda, const double* const* b, int64_t ldb,
    double* __restrict c, int64_t ldc) {
  V8 acc[Mr][S];
  for (int64_t r = 0; r < Mr; ++r) {
    for (int s = 0; s < S; ++s) load8(acc[r][s], c + r * ldc + 8 * s);
  }
  for (int64_t k = 0; k < K; ++k) {
    V8 bv[S];
    for (int s = 0; s < S; ++s) load8(bv[s], b[s] + k * ldb);
    for (int64_t r = 0; r < Mr; ++r) {
      const double ar = a[r * lda + k];
      const V8 av = {ar, ar, ar, ar, ar, ar, ar, ar};
      for (int s = 0; s < S; ++s) acc[r][s] += av * bv[s];
    }
  }
  for (int64_t r = 0; r < Mr; ++r) {
    for (int s = 0; s < S; ++s) store8(c + r * ldc + 8 * s, acc[r][s]);
  }
}

template <int64_t Mr>
__attribute__((target("avx512f"), always_inline)) inline void row_tiles512(
    int64_t nc, int64_t kc, const double* a, int64_t lda, const double* bs, int64_t bs_step,
    int64_t bs_ld, const double* b, int64_t ldb, double* c, int64_t ldc) {
  const int64_t strips = nc / kNr;
  int64_t t = 0;
  for (; t + 2 <= strips; t += 2) {
    const double* bp[2] = {bs + t * bs_step, bs + (t + 1) * bs_step};
    tile512<Mr, 2>(kc, a, lda, bp, bs_ld, c + t * kNr, ldc);
  }
  if (t < strips) {
    const double* bp[1] = {bs + t * bs_step};
    tile512<Mr, 1>(kc, a, lda, bp, bs_ld, c + t * kNr, ldc);
  }
  const int64_t j = strips * kNr;
  if (j < nc) tile_edge(Mr, nc - j, kc, a, lda, b + j, ldb, c + j, ldc);
}

/// Packs strips [0, nc / 8) of the kc × nc block at b into the thread's panel.
const double* pack_panel(const double* b, int64_t ldb, int64_t kc, int64_t nc) {
  double* panel = t_panel.data();
  for (int64_t t = 0; t < nc / kNr; ++t) {
    for (int64_t k = 0; k < kc; ++k) {
      std::memcpy(panel + (t * kc + k) * kNr, b + k * ldb + t * kNr, kNr * sizeof(double));
    }
  }
  return panel;
}

/// The blocked product both kernels share: k and column panels (the column panel packed when
/// enough row blocks reuse it: rows of B are a whole matrix row apart), then row blocks of
/// kMr through Rows::run<rows in the block>.
template <class Rows>
__attribute__((always_inline)) inline void gemm_panels(int64_t M, int64_t N, int64_t K,
                                                       const double* A, int64_t lda,
                                                       const double* B, int64_t ldb, double* C,
                                                       int64_t ldc) {
  const bool pack = M > 2 * kMr;
  if (pack) t_panel.resize(static_cast<size_t>(kKc * kNc));
  for (int64_t k0 = 0; k0 < K; k0 += kKc) {
    const int64_t kc = std::min(kKc, K - k0);
    for (int64_t j0 = 0; j0 < N; j0 += kNc) {
      const int64_t nc = std::min(kNc, N - j0);
      const double* b = B + k0 * ldb + j0;
      const double* bs = pack ? pack_panel(b, ldb, kc, nc) : b;
      const int64_t bs_step = pack ? kc * kNr : kNr, bs_ld = pack ? kNr : ldb;
      for (int64_t i = 0; i < M; i += kMr) {
        const double* a = A + i * lda + k0;
        double* c = C + i * ldc + j0;
        switch (std::min(kMr, M - i)) {
          case 4:
            Rows::template run<4>(nc, kc, a, lda, bs, bs_step, bs_ld, b, ldb, c, ldc);
            break;
          case 3:
            Rows::template run<3>(nc, kc, a, lda, bs, bs_step, bs_ld, b, ldb, c, ldc);
            break;
          case 2:
            Rows::template run<2>(nc, kc, a, lda, bs, bs_step, bs_ld, b, ldb, c, ldc);
            break;
          default:
            Rows::template run<1>(nc, kc, a, lda, bs, bs_step, bs_ld, b, ldb, c, ldc);
            break;
        }
      }
    }
  }
}

/// The AVX-512 row blocks (called, not forced inline: their target is not the caller's).
struct Avx512Rows {
  template <int64_t Mr>
  __attribute__((target("avx512f"))) static void run(int64_t nc, int64_t kc, const double* a,
                                                     int64_t lda, const double* bs, int64_t bs_step,
                                                     int64_t bs_ld, const double* b, int64_t ldb,
                                                     double* c, int64_t ldc) {
    row_tiles512<Mr>(nc, kc, a, lda, bs, bs_step, bs_ld, b, ldb, c, ldc);
  }
};

/// The V4 row blocks, inlined into each clone of gemm_acc_clones (AVX2 or portable code).
struct ClonedRows {
  template <int64_t Mr>
  __attribute__((always_inline)) static inline void run(int64_t nc, int64_t kc, const double* a,
                                                        int64_t lda, const double* bs,
                                                        int64_t bs_step, int64_t bs_ld,
                                                        const double* b, int64_t ldb, double* c,
                                                        int64_t ldc) {
    row_tiles<Mr>(nc, kc, a, lda, bs, bs_step, bs_ld, b, ldb, c, ldc);
  }
};

__attribute__((target("avx512f"))) void gemm_acc_avx512(int64_t M, int64_t N, int64_t K,
                                                        const double* A, int64_t lda,
                                                        const double* B, int64_t ldb, double* C,
                                                        int64_t ldc) {
  gemm_panels<Avx512Rows>(M, N, K, A, lda, B, ldb, C, ldc);
}

/// Whether gemm_acc takes the AVX-512 kernel: the CPU has it and QBC_GPTQ_NO_AVX512 is not
/// set (the tests run both kernels and compare their bits).
bool use_avx512() {
  static const bool yes =
      __builtin_cpu_supports("avx512f") && std::getenv("QBC_GPTQ_NO_AVX512") == nullptr;
  return yes;
}

}  // namespace

__attribute__((target_clones("avx2", "default"))) void gemm_acc_clones(int64_t M, int64_t N,
                                                                       int64_t K, const double* A,
                                                                       int64_t lda, const double* B,
                                                                       int64_t ldb, double* C,
                                                                       int64_t ldc) {
  gemm_panels<ClonedRows>(M, N, K, A, lda, B, ldb, C, ldc);
}

void gemm_acc(int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B,
              int64_t ldb, double* C, int64_t ldc) {
  if (M <= 0 || N <= 0 || K <= 0) return;
  if (use_avx512()) return gemm_acc_avx512(M, N, K, A, lda, B, ldb, C, ldc);
  gemm_acc_clones(M, N, K, A, lda, B, ldb, C, ldc);
}

// ---------------------------------------------------------------------------
// Dense fp64 factorisations on an n×n row-major buffer.

constexpr int64_t kNb = 128;  // block size of the factorisations

/// In-place lower Cholesky of the lower triangle of A (the strict upper triangle
/// is neither read nor written). Returns -1, or the first pivot that is not positive.
int64_t cholesky_lower(double* A, int64_t n, int threads) {
  std::vector<double> pt;  // the solved panel, transposed and negated: pt[c][i] = -L[k1+i][k0+c]
  for (int64_t k0 = 0; k0 < n; k0 += kNb) {
    const int64_t k1 = std::min(k0 + kNb, n), kb = k1 - k0;
    for (int64_t j = k0; j < k1; ++j) {  // the diagonal block, unblocked
      double d = A[j * n + j];
      for (int64_t p = k0; p < j; ++p) d -= A[j * n + p] * A[j * n + p];
      if (!(d > 0) || !std::isfinite(d)) return j;
      const double ljj = std::sqrt(d);
      A[j * n + j] = ljj;
      for (int64_t i = j + 1; i < k1; ++i) {
        double v = A[i * n + j];
        for (int64_t p = k0; p < j; ++p) v -= A[i * n + p] * A[j * n + p];
        A[i * n + j] = v / ljj;
      }
    }
    if (k1 == n) break;
    const int64_t m = n - k1;
    pt.resize(static_cast<size_t>(kb * m));
    // Panel: L[k1:, k0:k1] = A[k1:, k0:k1] · L_kk⁻ᵀ, solved on the transpose so
    // that the inner loops run over independent rows.
    parallel_chunks(m, 256, threads, [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) {
        for (int64_t c = 0; c < kb; ++c) pt[c * m + i] = A[(k1 + i) * n + k0 + c];
      }
      for (int64_t c = 0; c < kb; ++c) {
        double* __restrict pc = pt.data() + c * m;
        for (int64_t p = 0; p < c; ++p) {
          const double l = A[(k0 + c) * n + k0 + p];
          const double* __restrict pp = pt.data() + p * m;
          for (int64_t i = a; i < b; ++i) pc[i] -= l * pp[i];
        }
        const double dc = A[(k0 + c) * n + k0 + c];
        for (int64_t i = a; i < b; ++i) pc[i] /= dc;
      }
      for (int64_t i = a; i < b; ++i) {
        for (int64_t c = 0; c < kb; ++c) A[(k1 + i) * n + k0 + c] = pt[c * m + i];
      }
      for (int64_t c = 0; c < kb; ++c) {
        for (int64_t i = a; i < b; ++i) pt[c * m + i] = -pt[c * m + i];
      }
    });
    // Trailing update of the lower triangle: A[i][j] -= Σ_c L[i][k0+c] · L[j][k0+c].
    parallel_chunks(m, 128, threads, [&](int64_t a, int64_t b) {
      auto row = [&](int64_t i) { return A + (k1 + i) * n; };
      gemm_acc(b - a, a, kb, row(a) + k0, n, pt.data(), m, row(a) + k1, n);
      for (int64_t ib = a; ib < b; ib += kMr) {
        const int64_t mb = std::min(kMr, b - ib);
        gemm_acc(mb, ib - a, kb, row(ib) + k0, n, pt.data() + a, m, row(ib) + k1 + a, n);
        for (int64_t i = ib; i < ib + mb; ++i) {
          gemm_acc(1, i - ib + 1, kb, row(i) + k0, n, pt.data() + ib, m, row(i) + k1 + ib, n);
        }
      }
    });
  }
  return -1;
}

/// In-place inverse of the lower-triangular matrix in the lower triangle of A
/// (the strict upper triangle is neither read nor written). Blocks are done from
/// the bottom right: M_panel = −M_trailing · L_panel · M_diagonal.
void invert_lower(double* A, int64_t n, int threads) {
  std::vector<double> T, D, dneg;
  for (int64_t j0 = ((n - 1) / kNb) * kNb; j0 >= 0; j0 -= kNb) {
    const int64_t j1 = std::min(j0 + kNb, n), jb = j1 - j0;
    D.assign(static_cast<size_t>(jb * jb), 0.0);  // L_jj⁻¹, zeros above the diagonal
    for (int64_t j = 0; j < jb; ++j) {
      D[j * jb + j] = 1.0 / A[(j0 + j) * n + j0 + j];
      for (int64_t i = j + 1; i < jb; ++i) {
        double s = 0;
        for (int64_t k = j; k < i; ++k) s += A[(j0 + i) * n + j0 + k] * D[k * jb + j];
        D[i * jb + j] = -s / A[(j0 + i) * n + j0 + i];
      }
    }
    if (j1 < n) {
      const int64_t m = n - j1;
      dneg.resize(D.size());
      for (size_t e = 0; e < D.size(); ++e) dneg[e] = -D[e];
      T.assign(static_cast<size_t>(m * jb), 0.0);
      auto row = [&](int64_t i) { return A + (j1 + i) * n; };  // row j1 + i of A
      // T = M_trailing · L_panel: T[i][c] = Σ_{k ≤ i} M[i][k] · L[k][j0 + c].
      parallel_chunks(m, 128, threads, [&](int64_t a, int64_t b) {
        gemm_acc(b - a, jb, a, row(a) + j1, n, row(0) + j0, n, T.data() + a * jb, jb);
        for (int64_t ib = a; ib < b; ib += kMr) {
          const int64_t mb = std::min(kMr, b - ib);
          gemm_acc(mb, jb, ib - a, row(ib) + j1 + a, n, row(a) + j0, n, T.data() + ib * jb, jb);
          for (int64_t i = ib; i < ib + mb; ++i) {
            gemm_acc(1, jb, i - ib + 1, row(i) + j1 + ib, n, row(ib) + j0, n, T.data() + i * jb,
                     jb);
          }
        }
      });
      // M_panel = T · (−L_jj⁻¹), written over L_panel once all of T is known.
      parallel_chunks(m, 128, threads, [&](int64_t a, int64_t b) {
        for (int64_t i = a; i < b; ++i) std::fill(row(i) + j0, row(i) + j1, 0.0);
        gemm_acc(b - a, jb, jb, T.data() + a * jb, jb, dneg.data(), jb, row(a) + j0, n);
      });
    }
    for (int64_t i = 0; i < jb; ++i) {
      for (int64_t j = 0; j <= i; ++j) A[(j0 + i) * n + j0 + j] = D[i * jb + j];
    }
  }
}

/// A[j][i] := A[i][j] for j > i, by 64×64 tiles so both sides stay in cache.
void mirror_upper(double* A, int64_t n) {
  constexpr int64_t kT = 64;
  for (int64_t i0 = 0; i0 < n; i0 += kT) {
    for (int64_t j0 = i0; j0 < n; j0 += kT) {
      for (int64_t i = i0; i < std::min(i0 + kT, n); ++i) {
        for (int64_t j = std::max(j0, i + 1); j < std::min(j0 + kT, n); ++j) {
          A[j * n + i] = A[i * n + j];
        }
      }
    }
  }
}

/// A[i][j] := A[q[i]][q[j]] in place.
void permute_symmetric(std::vector<double>& A, int64_t n, const std::vector<int64_t>& q,
                       int threads) {
  parallel_chunks(n, 64, threads, [&](int64_t a, int64_t b) {
    std::vector<double> tmp(static_cast<size_t>(n));
    for (int64_t i = a; i < b; ++i) {
      double* row = A.data() + i * n;
      for (int64_t j = 0; j < n; ++j) tmp[j] = row[q[j]];
      std::copy(tmp.begin(), tmp.end(), row);
    }
  });
  std::vector<double> tmp(static_cast<size_t>(n));
  std::vector<char> done(static_cast<size_t>(n), 0);
  auto row = [&](int64_t i) { return A.begin() + i * n; };
  for (int64_t s = 0; s < n; ++s) {  // rows, by following the cycles of q
    if (done[s] || q[s] == s) continue;
    std::copy(row(s), row(s) + n, tmp.begin());
    int64_t j = s;
    for (;;) {
      done[j] = 1;
      const int64_t from = q[j];
      if (from == s) {
        std::copy(tmp.begin(), tmp.end(), row(j));
        break;
      }
      std::copy(row(from), row(from) + n, row(j));
      j = from;
    }
  }
}

/// Replaces A (symmetric, already in act order and reversed, see the file comment)
/// with U in its upper triangle. `orig_col[i]` is the original column of row i of A,
/// for error messages.
StatusOr<Damping> inverse_cholesky_upper(std::vector<double>& A, int64_t n, const GptqOptions& o,
                                         const std::vector<int64_t>& orig_col, int threads) {
  std::vector<double> diag(static_cast<size_t>(n));
  double mean = 0;
  for (int64_t i = 0; i < n; ++i) {
    diag[i] = A[i * n + i];
    mean += diag[i];
  }
  mean /= static_cast<double>(n);
  if (!(mean > 0) || !std::isfinite(mean)) {
    return invalid_argument("gptq: the mean of the Hessian diagonal is ", mean,
                            "; it must be positive and finite");
  }
  Damping dmp;
  dmp.fraction = o.perc_damp;
  int64_t pivot = -1;
  for (;;) {
    dmp.lambda = dmp.fraction * mean;
    for (int64_t i = 0; i < n; ++i) A[i * n + i] = diag[i] + dmp.lambda;
    pivot = cholesky_lower(A.data(), n, threads);
    if (pivot < 0) break;
    if (dmp.retries == o.max_damp_retries) {
      return failed_precondition(
          "gptq: Cholesky factorisation of the damped Hessian failed (pivot of input column ",
          orig_col[pivot], " not positive) after ", dmp.retries,
          " damping retries, the last with lambda = ", dmp.lambda, " (", dmp.fraction,
          " x mean diagonal); the Hessian is not positive semi-definite");
    }
    mirror_upper(A.data(), n);  // undo the attempt
    ++dmp.retries;
    dmp.fraction *= 10;
  }
  invert_lower(A.data(), n, threads);
  std::reverse(A.begin(), A.end());
  return dmp;
}
}  // namespace qbc::quant::gptq_detail
