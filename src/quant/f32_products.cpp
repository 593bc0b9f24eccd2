// fp32 products of the output-error searches (f32_products.h).
//
// Blocking: k panels of kKc rows; in each, groups of Kn::kS strips (kKc × kS × 16 floats:
// 32 KB for AVX-512's four, in L1) against row blocks of kMr rows of A. Y holds the
// running sums between k panels, so every element still adds its terms in increasing k.
#include "f32_products.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace qbc::quant::f32_detail {
namespace {

constexpr int64_t kKc = 128;  // rows of a k panel
constexpr int kMr = 4;        // rows of A in a register tile

/// Sixteen columns a register, four strips a tile: 16 accumulators of 32.
struct Avx512 {
  static constexpr int kS = 4;
  template <int Mr, int S>
  __attribute__((target("avx512f"))) static void tile(int64_t kc, const float* a, int64_t lda,
                                                      const float* b, int64_t bstep, float* y,
                                                      int64_t ldy) {
    __m512 acc[Mr][S];
    for (int r = 0; r < Mr; ++r) {
      for (int s = 0; s < S; ++s) acc[r][s] = _mm512_loadu_ps(y + r * ldy + s * kStrip);
    }
    for (int64_t k = 0; k < kc; ++k) {
      __m512 bv[S];
#pragma GCC unroll 4
      for (int s = 0; s < S; ++s) bv[s] = _mm512_loadu_ps(b + s * bstep + k * kStrip);
#pragma GCC unroll 4
      for (int r = 0; r < Mr; ++r) {
        const __m512 av = _mm512_set1_ps(a[r * lda + k]);
#pragma GCC unroll 4
        for (int s = 0; s < S; ++s) acc[r][s] = _mm512_fmadd_ps(av, bv[s], acc[r][s]);
      }
    }
    for (int r = 0; r < Mr; ++r) {
      for (int s = 0; s < S; ++s) _mm512_storeu_ps(y + r * ldy + s * kStrip, acc[r][s]);
    }
  }
};

/// Eight columns a register, one strip (two registers) a tile: 8 accumulators of 16.
struct Avx2 {
  static constexpr int kS = 1;
  template <int Mr, int S>
  __attribute__((target("avx2,fma"))) static void tile(int64_t kc, const float* a, int64_t lda,
                                                       const float* b, int64_t, float* y,
                                                       int64_t ldy) {
    static_assert(S == 1, "one strip a tile");
    __m256 acc[Mr][2];
    for (int r = 0; r < Mr; ++r) {
      acc[r][0] = _mm256_loadu_ps(y + r * ldy);
      acc[r][1] = _mm256_loadu_ps(y + r * ldy + 8);
    }
    for (int64_t k = 0; k < kc; ++k) {
      const __m256 b0 = _mm256_loadu_ps(b + k * kStrip), b1 = _mm256_loadu_ps(b + k * kStrip + 8);
#pragma GCC unroll 4
      for (int r = 0; r < Mr; ++r) {
        const __m256 av = _mm256_set1_ps(a[r * lda + k]);
        acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
      }
    }
    for (int r = 0; r < Mr; ++r) {
      _mm256_storeu_ps(y + r * ldy, acc[r][0]);
      _mm256_storeu_ps(y + r * ldy + 8, acc[r][1]);
    }
  }
};

/// One element at a time (the definition the other two must equal).
struct Portable {
  static constexpr int kS = 1;
  template <int Mr, int S>
  static void tile(int64_t kc, const float* a, int64_t lda, const float* b, int64_t bstep, float* y,
                   int64_t ldy) {
    for (int r = 0; r < Mr; ++r) {
      for (int s = 0; s < S; ++s) {
        for (int64_t j = 0; j < kStrip; ++j) {
          float acc = y[r * ldy + s * kStrip + j];
          for (int64_t k = 0; k < kc; ++k)
            acc = std::fmaf(a[r * lda + k], b[s * bstep + k * kStrip + j], acc);
          y[r * ldy + s * kStrip + j] = acc;
        }
      }
    }
  }
};

template <class Kn, int S>
void tile_rows(int mr, int64_t kc, const float* a, int64_t lda, const float* b, int64_t bstep,
               float* y, int64_t ldy) {
  switch (mr) {
    case 4:
      return Kn::template tile<4, S>(kc, a, lda, b, bstep, y, ldy);
    case 3:
      return Kn::template tile<3, S>(kc, a, lda, b, bstep, y, ldy);
    case 2:
      return Kn::template tile<2, S>(kc, a, lda, b, bstep, y, ldy);
    default:
      return Kn::template tile<1, S>(kc, a, lda, b, bstep, y, ldy);
  }
}

/// A tile of `s` strips (at most Kn::kS) and `mr` rows.
template <class Kn>
void tile_any(int s, int mr, int64_t kc, const float* a, int64_t lda, const float* b, int64_t bstep,
              float* y, int64_t ldy) {
  if constexpr (Kn::kS == 4) {
    switch (s) {
      case 4:
        return tile_rows<Kn, 4>(mr, kc, a, lda, b, bstep, y, ldy);
      case 3:
        return tile_rows<Kn, 3>(mr, kc, a, lda, b, bstep, y, ldy);
      case 2:
        return tile_rows<Kn, 2>(mr, kc, a, lda, b, bstep, y, ldy);
      default:
        break;
    }
  }
  tile_rows<Kn, 1>(mr, kc, a, lda, b, bstep, y, ldy);
}

template <class Kn>
void products_with(const float* A, int64_t rows, int64_t lda, const PackedColumns& x, float* Y) {
  const int64_t K = x.depth(), T = x.strips(), ldy = T * kStrip, bstep = K * kStrip;
  std::fill(Y, Y + rows * ldy, 0.0f);
  for (int64_t k0 = 0; k0 < K; k0 += kKc) {
    const int64_t kc = std::min(kKc, K - k0);
    for (int64_t t0 = 0; t0 < T; t0 += Kn::kS) {
      const int s = static_cast<int>(std::min<int64_t>(Kn::kS, T - t0));
      const float* b = x.strip(t0) + k0 * kStrip;
      for (int64_t r0 = 0; r0 < rows; r0 += kMr) {
        const int mr = static_cast<int>(std::min<int64_t>(kMr, rows - r0));
        const float* a = A + r0 * lda + k0;
        float* y = Y + r0 * ldy + t0 * kStrip;
        tile_any<Kn>(s, mr, kc, a, lda, b, bstep, y, ldy);
      }
    }
  }
}

}  // namespace

bool available(Kernel k) {
  switch (k) {
    case Kernel::kAvx512:
      return __builtin_cpu_supports("avx512f");
    case Kernel::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    default:
      return true;
  }
}

PackedColumns::PackedColumns(const double* x, int64_t K, int64_t N) : k_(K), n_(N) {
  v_.assign(static_cast<size_t>(strips() * K * kStrip), 0.0f);
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t j = 0; j < N; ++j) {
      v_[static_cast<size_t>(((j / kStrip) * K + k) * kStrip + j % kStrip)] =
          static_cast<float>(x[k * N + j]);
    }
  }
}

void products(const float* A, int64_t rows, int64_t lda, const PackedColumns& x, float* Y,
              Kernel kernel) {
  if (rows <= 0 || x.strips() == 0) return;
  if (kernel == Kernel::kAuto) {
    static const Kernel best = available(Kernel::kAvx512) ? Kernel::kAvx512
                               : available(Kernel::kAvx2) ? Kernel::kAvx2
                                                          : Kernel::kPortable;
    kernel = best;
  }
  switch (kernel) {
    case Kernel::kAvx512:
      return products_with<Avx512>(A, rows, lda, x, Y);
    case Kernel::kAvx2:
      return products_with<Avx2>(A, rows, lda, x, Y);
    default:
      return products_with<Portable>(A, rows, lda, x, Y);
  }
}

}  // namespace qbc::quant::f32_detail
