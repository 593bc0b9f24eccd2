// GPTQ for one linear layer, and Hessian accumulation (include/qbc/quant/gptq.h).
//
// Linear algebra, all fp64, in place in the Hessian's buffer with O(in) extra memory:
//   A = J P H Pᵀ J    act-order permutation P, then the reversal J (i -> n-1-i)
//   A + λI = L Lᵀ     blocked right-looking Cholesky, lower triangle only
//   M = L⁻¹           blocked lower-triangular inverse
//   U = J M J         reversing the flat buffer moves M to the upper triangle
// Then UᵀU = (P H Pᵀ + λI)⁻¹ with U upper and a positive diagonal, so U is the
// chol(H⁻¹, upper) of GPTQ, for 2n³/3 flops instead of the n³ of GPTQ's
// chol + cholesky_inverse + chol. The factorisation never writes the strict
// upper triangle, so a failed attempt is undone by copying it back.
//
// Every matrix product goes through gemm_acc(), which adds the terms of each
// output element to it one at a time, in increasing k order, without fused
// multiply-adds (qbc_quant builds with -ffp-contract=off). Splitting a product
// by rows, columns or k ranges, running it on any number of threads, or with
// any vector width (gemm_acc has an AVX2 clone) gives bit-identical results.
#include "qbc/quant/gptq.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <system_error>
#include <thread>
#include <utility>

namespace qbc::quant {
namespace {

// ---------------------------------------------------------------------------
// Threads: work is split into chunks of independent rows, handed out
// dynamically. Which thread runs a chunk never changes what it computes.

int resolve_threads(int requested) {
  if (requested > 0) return requested;
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? 1 : static_cast<int>(std::min(hw, 64u));
}

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

// ---------------------------------------------------------------------------
// gemm_acc: C[i][j] += Σ_k A[i][k] · B[k][j], row-major, k in increasing order.

constexpr int64_t kMr = 4;    // rows of the register tile
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

__attribute__((target_clones("avx2", "default"))) void gemm_acc(int64_t M, int64_t N, int64_t K,
                                                                const double* A, int64_t lda,
                                                                const double* B, int64_t ldb,
                                                                double* C, int64_t ldc) {
  if (M <= 0 || N <= 0 || K <= 0) return;
  // Rows of B are far apart (a whole matrix row): packing the panel makes the tile
  // read one contiguous stream. It pays off once a few row blocks reuse it.
  const bool pack = M > 2 * kMr;
  if (pack) t_panel.resize(static_cast<size_t>(kKc * kNc));
  for (int64_t k0 = 0; k0 < K; k0 += kKc) {
    const int64_t kc = std::min(kKc, K - k0);
    for (int64_t j0 = 0; j0 < N; j0 += kNc) {
      const int64_t nc = std::min(kNc, N - j0);
      const double* b = B + k0 * ldb + j0;
      const double* bs = b;
      int64_t bs_step = kNr, bs_ld = ldb;
      if (pack) {
        double* panel = t_panel.data();
        for (int64_t t = 0; t < nc / kNr; ++t) {
          for (int64_t k = 0; k < kc; ++k) {
            std::memcpy(panel + (t * kc + k) * kNr, b + k * ldb + t * kNr, kNr * sizeof(double));
          }
        }
        bs = panel;
        bs_step = kc * kNr;
        bs_ld = kNr;
      }
      for (int64_t i = 0; i < M; i += kMr) {
        const double* a = A + i * lda + k0;
        double* c = C + i * ldc + j0;
        switch (std::min(kMr, M - i)) {
          case 4:
            row_tiles<4>(nc, kc, a, lda, bs, bs_step, bs_ld, b, ldb, c, ldc);
            break;
          case 3:
            row_tiles<3>(nc, kc, a, lda, bs, bs_step, bs_ld, b, ldb, c, ldc);
            break;
          case 2:
            row_tiles<2>(nc, kc, a, lda, bs, bs_step, bs_ld, b, ldb, c, ldc);
            break;
          default:
            row_tiles<1>(nc, kc, a, lda, bs, bs_step, bs_ld, b, ldb, c, ldc);
            break;
        }
      }
    }
  }
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

struct Damping {
  double lambda = 0;
  double fraction = 0;
  int retries = 0;
};

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

// ---------------------------------------------------------------------------
// Scales (docs/numerics.md, docs/research/quant.md §2.1 and §2.3).

int qmax_of(int bits) { return (1 << (bits - 1)) - 1; }

double code_of(double w, double s, int qm) {
  return std::clamp(std::nearbyint(w / s), static_cast<double>(-qm - 1), static_cast<double>(qm));
}

/// Σ |s·q(w) − w|^norm over w[0, len), stopping early once it reaches `bound`.
double clip_error(const double* w, int64_t len, float s, int qm, double norm, double bound) {
  const double ds = s;
  double sum = 0;
  for (int64_t j = 0; j < len; ++j) {
    const double d = std::fabs(ds * code_of(w[j], ds, qm) - w[j]);
    sum += norm == 2.0 ? d * d : std::pow(d, norm);
    if (sum >= bound) break;
  }
  return sum;
}

/// The scale of the weights w[0, len): absmax / qmax in fp32 (as quantize_rtn), or
/// the MSE grid search over shrunk ranges (the first minimum wins).
float segment_scale(const double* w, int64_t len, int qm, const GptqOptions& o) {
  float amax = 0;
  for (int64_t j = 0; j < len; ++j) amax = std::max(amax, static_cast<float>(std::fabs(w[j])));
  const float s0 = std::max(amax / static_cast<float>(qm), 1e-8f);
  if (!o.mse_clip || amax == 0) return s0;
  float best = s0;
  double best_err = clip_error(w, len, s0, qm, o.mse_norm, std::numeric_limits<double>::infinity());
  const int steps = static_cast<int>(o.mse_max_shrink * o.mse_grid + 1e-9);
  for (int i = 1; i < steps; ++i) {
    const double p = 1.0 - static_cast<double>(i) / o.mse_grid;
    const float s = std::max(static_cast<float>(p * amax / qm), 1e-8f);
    const double err = clip_error(w, len, s, qm, o.mse_norm, best_err);
    if (err < best_err) {
      best_err = err;
      best = s;
    }
  }
  return best;
}

/// Scales [out, groups] of W (fp64, original column order).
std::vector<float> compute_scales(const std::vector<double>& W, int64_t out, int64_t in,
                                  const GptqOptions& o, int threads) {
  const int64_t gs = o.group_size > 0 ? o.group_size : in;
  const int64_t groups = (in + gs - 1) / gs;
  std::vector<float> scales(static_cast<size_t>(out * groups));
  const int qm = qmax_of(o.bits);
  parallel_chunks(out, 16, threads, [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; ++r) {
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t c0 = g * gs, len = std::min(gs, in - c0);
        scales[r * groups + g] = segment_scale(W.data() + r * in + c0, len, qm, o);
      }
    }
  });
  return scales;
}

Status check_inputs(const std::vector<float>& W, int64_t out, int64_t in, const GptqOptions& o) {
  if (out <= 0 || in <= 0) return invalid_argument("weight shape [", out, ", ", in, "] is empty");
  if (static_cast<int64_t>(W.size()) != out * in) {
    return invalid_argument("weight has ", W.size(), " values, expected [", out, ", ", in,
                            "] = ", out * in);
  }
  if (o.bits < 2 || o.bits > 8) return invalid_argument("bits = ", o.bits, " (supported: 2..8)");
  if (o.group_size < 0) return invalid_argument("group_size = ", o.group_size, " is negative");
  if (o.mse_clip &&
      (!(o.mse_norm > 0) || o.mse_grid < 1 || !(o.mse_max_shrink >= 0) || o.mse_max_shrink >= 1)) {
    return invalid_argument(
        "MSE clip search: need mse_norm > 0, mse_grid >= 1 and "
        "mse_max_shrink in [0, 1)");
  }
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t c = 0; c < in; ++c) {
      const float v = W[r * in + c];
      if (!std::isfinite(v)) {
        return invalid_argument("weight (", r, ", ", c, ") is not finite (", v, ")");
      }
    }
  }
  return ok_status();
}

GptqResult make_result(int64_t out, int64_t in, const GptqOptions& o) {
  GptqResult r;
  r.out = out;
  r.in = in;
  r.bits = o.bits;
  r.group_size = o.group_size;
  r.codes.assign(static_cast<size_t>(out * in), 0);
  return r;
}

constexpr int64_t kHessianTile = 256;  // calibration rows per rank-k update
constexpr int64_t kSweepRows = 128;    // output rows per GPTQ work item

}  // namespace

// ---------------------------------------------------------------------------

int64_t GptqResult::groups() const {
  return group_size > 0 ? (in + group_size - 1) / group_size : 1;
}

float GptqResult::scale(int64_t row, int64_t col) const {
  return scales[row * groups() + (group_size > 0 ? col / group_size : 0)];
}

std::vector<float> dequantize(const GptqResult& r) {
  std::vector<float> w(r.codes.size());
  for (int64_t row = 0; row < r.out; ++row) {
    for (int64_t c = 0; c < r.in; ++c) {
      const int64_t k = row * r.in + c;
      w[k] = static_cast<float>(static_cast<double>(r.scale(row, c)) * r.codes[k]);
    }
  }
  return w;
}

HessianAccumulator::HessianAccumulator(int64_t in, int num_threads)
    : in_(std::max<int64_t>(in, 0)),
      num_threads_(resolve_threads(num_threads)),
      sum_(static_cast<size_t>(in_ * in_), 0.0) {}

Status HessianAccumulator::add(const float* x, int64_t rows) {
  if (rows < 0) return invalid_argument("Hessian: negative row count ", rows);
  if (rows == 0) return ok_status();
  if (x == nullptr) return invalid_argument("Hessian: null calibration rows");
  const int64_t n = in_;
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(x[t * n + i])) {
        return invalid_argument("Hessian: calibration row ", samples_ + t, " feature ", i,
                                " is not finite (", x[t * n + i], ")");
      }
    }
  }
  std::vector<double> xd, xt;  // a tile of rows [kt, n] and its transpose [n, kt]
  for (int64_t t0 = 0; t0 < rows; t0 += kHessianTile) {
    const int64_t kt = std::min(kHessianTile, rows - t0);
    xd.resize(static_cast<size_t>(kt * n));
    xt.resize(static_cast<size_t>(kt * n));
    for (int64_t t = 0; t < kt; ++t) {
      for (int64_t i = 0; i < n; ++i) {
        const double v = x[(t0 + t) * n + i];
        xd[t * n + i] = v;
        xt[i * kt + t] = v;
      }
    }
    // S[i][j] += Σ_t x[t][i] · x[t][j] for j ≥ i, by chunks of rows i.
    double* S = sum_.data();
    parallel_chunks(n, 128, num_threads_, [&](int64_t a, int64_t b) {
      gemm_acc(b - a, n - b, kt, xt.data() + a * kt, kt, xd.data() + b, n, S + a * n + b, n);
      for (int64_t ib = a; ib < b; ib += kMr) {
        const int64_t mb = std::min(kMr, b - ib), jb = ib + mb;
        gemm_acc(mb, b - jb, kt, xt.data() + ib * kt, kt, xd.data() + jb, n, S + ib * n + jb, n);
        for (int64_t i = ib; i < jb; ++i) {
          gemm_acc(1, jb - i, kt, xt.data() + i * kt, kt, xd.data() + i, n, S + i * n + i, n);
        }
      }
    });
  }
  samples_ += rows;
  return ok_status();
}

StatusOr<std::vector<double>> HessianAccumulator::hessian() const {
  if (samples_ == 0) return failed_precondition("Hessian: no calibration rows were added");
  const int64_t n = in_;
  const double factor = 2.0 / static_cast<double>(samples_);
  std::vector<double> H(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i; j < n; ++j) H[i * n + j] = sum_[i * n + j] * factor;
  }
  mirror_upper(H.data(), n);
  return H;
}

StatusOr<GptqResult> rtn_quantize(const std::vector<float>& W, int64_t out, int64_t in,
                                  const GptqOptions& options) {
  QBC_RETURN_IF_ERROR(check_inputs(W, out, in, options).with_context("rtn"));
  const int threads = resolve_threads(options.num_threads);
  const std::vector<double> wd(W.begin(), W.end());
  GptqResult r = make_result(out, in, options);
  r.scales = compute_scales(wd, out, in, options, threads);
  const int qm = qmax_of(options.bits);
  for (int64_t row = 0; row < out; ++row) {
    for (int64_t c = 0; c < in; ++c) {
      r.codes[row * in + c] = static_cast<int8_t>(code_of(wd[row * in + c], r.scale(row, c), qm));
    }
  }
  return r;
}

StatusOr<GptqResult> gptq_quantize(const std::vector<float>& W, int64_t out, int64_t in,
                                   std::vector<double> H, const GptqOptions& o) {
  QBC_RETURN_IF_ERROR(check_inputs(W, out, in, o).with_context("gptq"));
  const int64_t n = in;
  if (static_cast<int64_t>(H.size()) != n * n) {
    return invalid_argument("gptq: Hessian has ", H.size(), " entries, expected in x in = ", n * n);
  }
  if (o.block_size < 1) return invalid_argument("gptq: block_size = ", o.block_size, " < 1");
  if (!(o.perc_damp > 0) || o.perc_damp > 1) {
    return invalid_argument("gptq: perc_damp = ", o.perc_damp, " is outside (0, 1]");
  }
  if (o.max_damp_retries < 0) return invalid_argument("gptq: max_damp_retries is negative");
  // Only the upper triangle is read: check it, then mirror it.
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i; j < n; ++j) {
      const double v = H[i * n + j];
      if (!std::isfinite(v)) {
        return invalid_argument("gptq: Hessian entry (", i, ", ", j, ") is not finite (", v, ")");
      }
    }
    if (H[i * n + i] < 0) {
      return invalid_argument("gptq: Hessian diagonal entry ", i, " is negative (", H[i * n + i],
                              "); a Hessian is a sum of x^T x");
    }
  }
  mirror_upper(H.data(), n);
  const int threads = resolve_threads(o.num_threads);
  GptqResult r = make_result(out, n, o);

  // Dead columns: no calibration input ever reached them.
  std::vector<double> wd(W.begin(), W.end());
  for (int64_t i = 0; i < n; ++i) {
    if (H[i * n + i] != 0) continue;
    H[i * n + i] = 1;
    ++r.dead_columns;
    for (int64_t row = 0; row < out; ++row) wd[row * n + i] = 0;
  }
  r.scales = compute_scales(wd, out, n, o, threads);

  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  if (o.act_order) {
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int64_t a, int64_t b) { return H[a * n + a] > H[b * n + b]; });
  }
  std::vector<double> wp(static_cast<size_t>(out * n));  // W in act order
  for (int64_t row = 0; row < out; ++row) {
    for (int64_t i = 0; i < n; ++i) wp[row * n + i] = wd[row * n + perm[i]];
  }
  std::vector<double>().swap(wd);

  std::vector<int64_t> q(perm.rbegin(), perm.rend());  // act order, reversed
  permute_symmetric(H, n, q, threads);
  QBC_ASSIGN_OR_RETURN(const Damping dmp, inverse_cholesky_upper(H, n, o, q, threads));
  r.damp = dmp.lambda;
  r.damp_fraction = dmp.fraction;
  r.damp_retries = dmp.retries;

  // The sweep. Rows of W are independent given U: each work item owns a chunk of rows.
  const double* U = H.data();
  const int qm = qmax_of(o.bits);
  const int64_t groups = r.groups();
  const int64_t bs = std::min(o.block_size, n);
  std::vector<double> row_loss(static_cast<size_t>(out), 0.0);
  parallel_chunks(out, kSweepRows, threads, [&](int64_t a, int64_t b) {
    std::vector<double> err_neg(static_cast<size_t>((b - a) * bs));
    for (int64_t i1 = 0; i1 < n; i1 += bs) {
      const int64_t i2 = std::min(i1 + bs, n), cnt = i2 - i1;
      for (int64_t row = a; row < b; ++row) {
        double* __restrict w = wp.data() + row * n;
        const float* s_row = r.scales.data() + row * groups;
        double loss = row_loss[row];
        for (int64_t i = i1; i < i2; ++i) {
          const int64_t col = perm[i];
          const double s = s_row[o.group_size > 0 ? col / o.group_size : 0];
          const double code = code_of(w[i], s, qm);
          r.codes[row * n + col] = static_cast<int8_t>(code);
          const double* __restrict u = U + i * n;
          const double e = (w[i] - s * code) / u[i];
          loss += e * e;
          for (int64_t j = i + 1; j < i2; ++j) w[j] -= e * u[j];
          err_neg[(row - a) * cnt + (i - i1)] = -e;
        }
        row_loss[row] = loss;
      }
      // Lazy batch update of the later columns: W[:, i2:] -= Err · U[i1:i2, i2:].
      gemm_acc(b - a, n - i2, cnt, err_neg.data(), cnt, U + i1 * n + i2, n, wp.data() + a * n + i2,
               n);
    }
  });
  double loss = 0;
  for (double l : row_loss) loss += l;
  r.proxy_loss = 0.5 * loss;
  return r;
}

}  // namespace qbc::quant
