// fp16 row conversions (see fp16_rows.h).
#include "fp16_rows.h"

#include <cstring>

#include "qbc/numerics/fp16.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define QBC_RUNTIME_F16C 1
#endif

namespace qbc::runtime {
namespace {

void load_portable(const uint8_t* p, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    out[i] = numerics::fp16_from_bits(h);
  }
}

void store_portable(const float* v, int64_t n, uint8_t* p) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = numerics::fp16_bits(v[i]);
    std::memcpy(p + 2 * i, &h, 2);
  }
}

#ifdef QBC_RUNTIME_F16C
#include <cpuid.h>

bool host_has_f16c() {
  static const bool has = [] {
    __builtin_cpu_init();  // safe to call early (static initialisation order)
    // F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports has no "f16c".
    unsigned a = 0, b = 0, c = 0, d = 0;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
    return __builtin_cpu_supports("avx") && f16c;
  }();
  return has;
}

__attribute__((target("avx,f16c"))) void load_f16c(const uint8_t* p, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2 * i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  load_portable(p + 2 * i, n - i, out + i);
}

__attribute__((target("avx,f16c"))) void store_f16c(const float* v, int64_t n, uint8_t* p) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(v + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 2 * i), h);
  }
  store_portable(v + i, n - i, p + 2 * i);
}

#endif

}  // namespace

bool fp16_rows_use_f16c() {
#ifdef QBC_RUNTIME_F16C
  return host_has_f16c();
#else
  return false;
#endif
}

void load_f16(const uint8_t* p, int64_t n, float* out) {
#ifdef QBC_RUNTIME_F16C
  if (host_has_f16c()) return load_f16c(p, n, out);
#endif
  load_portable(p, n, out);
}

void store_f16(const float* v, int64_t n, uint8_t* p) {
#ifdef QBC_RUNTIME_F16C
  if (host_has_f16c()) return store_f16c(v, n, p);
#endif
  store_portable(v, n, p);
}

void round_f16(float* v, int64_t n) {
  uint16_t h[64];
  for (int64_t i = 0; i < n; i += 64) {
    const int64_t k = n - i < 64 ? n - i : 64;
    store_f16(v + i, k, reinterpret_cast<uint8_t*>(h));
    load_f16(reinterpret_cast<const uint8_t*>(h), k, v + i);
  }
}

}  // namespace qbc::runtime
