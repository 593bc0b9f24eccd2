// Vector loops of the executor (see vec_kernels.h). The AVX variants are compiled with a
// target attribute and picked at run time, as in matmul_kernel.cpp; each lane computes one
// element exactly as the scalar loop does (separate multiply and add instructions).
#include "vec_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QBC_RUNTIME_AVX 1
#endif

namespace qbc::runtime {
namespace {

void rot_corrections_portable(const float* q, const float* kt, int64_t ld, int64_t hd, int64_t j0,
                              int64_t n, float* corr) {
  for (int64_t j = j0; j < n; ++j) {
    float s = 0.0f;
    for (int64_t c = 0; c < hd; ++c) s += q[c] * kt[c * ld + j];
    corr[j] = s;
  }
}

#ifdef QBC_RUNTIME_AVX

__attribute__((target("avx2"))) void rot_corrections_avx2(const float* q, const float* kt,
                                                          int64_t ld, int64_t hd, int64_t n,
                                                          float* corr) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    for (int64_t c = 0; c < hd; ++c) {
      const __m256 qc = _mm256_set1_ps(q[c]);
      const float* row = kt + c * ld + j;
      a = _mm256_add_ps(a, _mm256_mul_ps(qc, _mm256_loadu_ps(row)));
      b = _mm256_add_ps(b, _mm256_mul_ps(qc, _mm256_loadu_ps(row + 8)));
    }
    _mm256_storeu_ps(corr + j, a);
    _mm256_storeu_ps(corr + j + 8, b);
  }
  for (; j + 8 <= n; j += 8) {
    __m256 a = _mm256_setzero_ps();
    for (int64_t c = 0; c < hd; ++c)
      a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_set1_ps(q[c]), _mm256_loadu_ps(kt + c * ld + j)));
    _mm256_storeu_ps(corr + j, a);
  }
  rot_corrections_portable(q, kt, ld, hd, j, n, corr);
}

#endif

}  // namespace

bool cpu_has_avx2() {
#ifdef QBC_RUNTIME_AVX
  static const bool has = [] {
    __builtin_cpu_init();  // safe to call early (static initialisation order)
    return __builtin_cpu_supports("avx2") != 0;
  }();
  return has;
#else
  return false;
#endif
}

void rot_corrections(const float* q, const float* kt, int64_t ld, int64_t hd, int64_t n,
                     float* corr) {
#ifdef QBC_RUNTIME_AVX
  if (cpu_has_avx2()) return rot_corrections_avx2(q, kt, ld, hd, n, corr);
#endif
  rot_corrections_portable(q, kt, ld, hd, 0, n, corr);
}

}  // namespace qbc::runtime
