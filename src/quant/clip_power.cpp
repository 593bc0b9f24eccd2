// The error powers of the MSE clip search (clip_power.h).
//
// d = m · 2^e with m in [√½, √2): log2 d = e + ln(m) / ln 2, ln m = 2·atanh(t) with
// t = (m − 1)/(m + 1), |t| ≤ 0.172, by its series to t^15 (truncation below 2e-13 of ln m's
// scale). y = p · log2 d = k + f with k = round(y), |f| ≤ ½, and 2^f = e^(f ln 2) by its
// Taylor series to degree 13 (truncation below 1e-17). The exponent field is read and 2^k
// written through the bits (integer fields turned into doubles by the 2^52 trick), so each
// step is an elementwise +, ×, ÷, comparison, select or bit operation on GCC vector types
// (four lanes in the portable and AVX2 kernels, eight in the AVX-512 one), which every vector
// width computes alike; power() runs the same code on one broadcast value. The code of a
// weight rounds by the same 2^52 trick (nearbyint for |x| < 2^51; the quotient is clamped
// to ±2^50 first, far outside any code range).
#include "clip_power.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace qbc::quant::clip_detail {
namespace {

typedef double V4 __attribute__((vector_size(32)));
typedef int64_t M4 __attribute__((vector_size(32)));
typedef double V8 __attribute__((vector_size(64)));
typedef int64_t M8 __attribute__((vector_size(64)));

// Each step below runs over K independent vectors (a loop the compiler unrolls), so the CPU
// overlaps K chains of the series instead of waiting on one.
#define QBC_LANES for (int i = 0; i < K; ++i)

/// u = c[0]·x^(n−1) + ... + c[n − 1] lane by lane for K vectors: u = c[0]·x + c[1], then
/// u = u·x + c[j] (n >= 2).
template <class V, int K>
__attribute__((always_inline)) inline void horner(const double* c, int n, const V* x, V* u) {
  QBC_LANES u[i] = x[i] * c[0] + c[1];
  for (int j = 2; j < n; ++j) {
    QBC_LANES u[i] = u[i] * x[i] + c[j];
  }
}

/// out = |s·(clamp(rne(w / s) + z, lo, hi) − z) − w|^p lane by lane, for K vectors (each
/// with its own weights, scales and zero points).
template <class V, class M, int K>
__attribute__((always_inline)) inline void error_lanes(const V* w, const V* s, const V* z,
                                                       double lo, double hi, double p, V* out) {
  constexpr double kTwo52 = 4503599627370496.0;  // 2^52
  constexpr double kRound = 1.5 * kTwo52;
  constexpr double kSqrt2 = 1.4142135623730951;
  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kLn2 = 0.6931471805599453;
  V d[K], e[K], m[K], t[K], t2[K], u[K], y[K], k[K];
  M field[K];
  QBC_LANES {  // the error
    V x = w[i] / s[i];
    x = x < -0x1p50 ? V{} - 0x1p50 : x;
    x = x > 0x1p50 ? V{} + 0x1p50 : x;
    V c = ((x + kRound) - kRound) + z[i];
    c = c < lo ? V{} + lo : c;
    c = c > hi ? V{} + hi : c;
    d[i] = s[i] * (c - z[i]) - w[i];
    d[i] = d[i] < 0.0 ? -d[i] : d[i];
  }
  QBC_LANES {  // d = m · 2^e, m in [√½, √2)
    const M b = (M)d[i];
    field[i] = (b >> 52) & 0x7ff;
    e[i] = (V)(field[i] | 0x4330000000000000LL) - kTwo52;  // exact: field < 2^52
    m[i] = (V)((b & 0x000fffffffffffffLL) | 0x3ff0000000000000LL);
    const M high = m[i] > kSqrt2;
    m[i] = high ? m[i] * 0.5 : m[i];
    e[i] = (high ? e[i] + 1.0 : e[i]) - 1023.0;
    t[i] = (m[i] - 1.0) / (m[i] + 1.0);
    t2[i] = t[i] * t[i];
  }
  // ln m = 2t (1 + t²/3 + ... + t¹⁴/15), by Horner in t² from the highest term.
  static constexpr double kLn[] = {1.0 / 15, 1.0 / 13, 1.0 / 11, 1.0 / 9,
                                   1.0 / 7,  1.0 / 5,  1.0 / 3,  1.0};
  horner<V, K>(kLn, sizeof kLn / sizeof kLn[0], t2, u);
  QBC_LANES {  // y = p · log2 d = k + x / ln 2, k = round(y)
    y[i] = p * (e[i] + (2.0 * t[i] * u[i]) * kLog2e);
    y[i] = y[i] < -1100.0 ? V{} - 1100.0 : y[i];
    y[i] = y[i] > 1100.0 ? V{} + 1100.0 : y[i];
    k[i] = (y[i] + kRound) - kRound;
    y[i] = (y[i] - k[i]) * kLn2;
  }
  // e^x to x^13 / 13!, by Horner from the highest term.
  static constexpr double kExp[] = {1.0 / 6227020800.0,
                                    1.0 / 479001600.0,
                                    1.0 / 39916800.0,
                                    1.0 / 3628800.0,
                                    1.0 / 362880.0,
                                    1.0 / 40320.0,
                                    1.0 / 5040.0,
                                    1.0 / 720.0,
                                    1.0 / 120.0,
                                    1.0 / 24.0,
                                    1.0 / 6.0,
                                    0.5,
                                    1.0,
                                    1.0};
  horner<V, K>(kExp, sizeof kExp / sizeof kExp[0], y, u);
  QBC_LANES {  // × 2^k through its bits, the biased exponent clamped to the normal range
    V kb = k[i] + 1023.0;
    kb = kb < 1.0 ? V{} + 1.0 : kb;
    kb = kb > 2046.0 ? V{} + 2046.0 : kb;
    kb = kb + kTwo52;
    const V r = u[i] * (V)(((M)kb & 0x7ff) << 52);
    const M zero = (field[i] == 0) | (k[i] < -1022.0);  // zero, subnormal, below 2^-1022.5
    const M inf = k[i] > 1023.0;
    out[i] = zero ? V{} : inf ? V{} + HUGE_VAL : r;
  }
}

#undef QBC_LANES

/// power_errors() with candidates in CV vectors of L lanes (CV · L = kBatch): E elements at a
/// time, each broadcast against every candidate, so E · CV independent chains per step.
template <class V, class M, int L, int CV>
__attribute__((always_inline)) inline void errors_loop(const double* w, int64_t len,
                                                       const double* s, const double* z, int count,
                                                       int qm, double p, double bound,
                                                       double* out) {
  static_assert(L * CV == kBatch, "a batch is eight candidates");
  constexpr int E = 4;
  const double lo = -qm - 1.0, hi = qm;
  V sv[CV], zv[CV], acc[CV];
  for (int c = 0; c < kBatch; ++c) {  // padding candidates: s = 1, sum +inf (always done)
    sv[c / L][c % L] = c < count ? s[c] : 1.0;
    zv[c / L][c % L] = c < count ? z[c] : 0.0;
    acc[c / L][c % L] = c < count ? 0.0 : HUGE_VAL;
  }
  V sk[E * CV], zk[E * CV];
  for (int k = 0; k < E * CV; ++k) {
    sk[k] = sv[k % CV];
    zk[k] = zv[k % CV];
  }
  int64_t j = 0;
  for (; j + E <= len; j += E) {
    V wk[E * CV], e[E * CV];
    for (int k = 0; k < E * CV; ++k) wk[k] = V{} + w[j + k / CV];
    error_lanes<V, M, E * CV>(wk, sk, zk, lo, hi, p, e);
    for (int k = 0; k < E * CV; ++k) acc[k % CV] += e[k];  // element by element, in order
    M done = acc[0] >= bound;
    for (int c = 1; c < CV; ++c) done &= acc[c] >= bound;
    bool all = true;
    for (int l = 0; l < L; ++l) all = all && done[l] != 0;
    if (all) break;
  }
  if (j + E > len) {
    for (; j < len; ++j) {
      V wk[CV], e[CV];
      for (int k = 0; k < CV; ++k) wk[k] = V{} + w[j];
      error_lanes<V, M, CV>(wk, sv, zv, lo, hi, p, e);
      for (int k = 0; k < CV; ++k) acc[k] += e[k];
    }
  }
  for (int c = 0; c < count; ++c) out[c] = acc[c / L][c % L];
}

__attribute__((target("avx512f"))) void errors_avx512(const double* w, int64_t len, const double* s,
                                                      const double* z, int count, int qm, double p,
                                                      double bound, double* out) {
  errors_loop<V8, M8, 8, 1>(w, len, s, z, count, qm, p, bound, out);
}

__attribute__((target("avx2"))) void errors_avx2(const double* w, int64_t len, const double* s,
                                                 const double* z, int count, int qm, double p,
                                                 double bound, double* out) {
  errors_loop<V4, M4, 4, 2>(w, len, s, z, count, qm, p, bound, out);
}

void errors_portable(const double* w, int64_t len, const double* s, const double* z, int count,
                     int qm, double p, double bound, double* out) {
  errors_loop<V4, M4, 4, 2>(w, len, s, z, count, qm, p, bound, out);
}

}  // namespace

bool available(Kernel k) {
  switch (k) {
    case Kernel::kAvx512:
      return __builtin_cpu_supports("avx512f");
    case Kernel::kAvx2:
      return __builtin_cpu_supports("avx2");
    default:
      return true;
  }
}

double power(double d, double p) {
  // The lanes' code on one error: w = −d with s = 1 and z = 0 has code 0 when the range
  // [lo, hi] = [0, 0] clamps it, so the error is |0 − w| = d.
  const V4 w = V4{} - d, one = V4{} + 1.0, zero{};
  V4 out;
  error_lanes<V4, M4, 1>(&w, &one, &zero, 0.0, 0.0, p, &out);
  return out[0];
}

void power_errors(const double* w, int64_t len, const double* s, const double* z, int count, int qm,
                  double p, double bound, double* out, Kernel kernel) {
  if (count <= 0) return;
  if (kernel == Kernel::kAuto) {
    static const Kernel best = available(Kernel::kAvx512) ? Kernel::kAvx512
                               : available(Kernel::kAvx2) ? Kernel::kAvx2
                                                          : Kernel::kPortable;
    kernel = best;
  }
  count = std::min(count, kBatch);
  switch (kernel) {
    case Kernel::kAvx512:
      return errors_avx512(w, len, s, z, count, qm, p, bound, out);
    case Kernel::kAvx2:
      return errors_avx2(w, len, s, z, count, qm, p, bound, out);
    default:
      return errors_portable(w, len, s, z, count, qm, p, bound, out);
  }
}

}  // namespace qbc::quant::clip_detail
