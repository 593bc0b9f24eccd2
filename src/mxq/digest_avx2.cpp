// XXH3-128 with the AVX2 kernels (Debian's libxxhash is built for SSE2), for the section
// digests of large files: the same digest, about twice as fast. This file alone is compiled
// with -mavx2 (src/mxq/CMakeLists.txt) and includes nothing but xxhash.h, whose functions
// become static here (XXH_INLINE_ALL), so no AVX2 code can stand in for a function of another
// file; callers check the CPU first (digest_avx2_usable).
#define XXH_INLINE_ALL
#include "digest_avx2.h"

#include <xxhash.h>

namespace qbc::mxq {

bool digest_avx2_usable() {
#if defined(__x86_64__) && defined(__AVX2__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") != 0;
#else
  return false;  // not built for AVX2: the library's digest
#endif
}

bool digest_avx2(const unsigned char* data, unsigned long size, unsigned long step,
                 void (*after)(void* ctx, unsigned long lo, unsigned long hi), void* ctx,
                 unsigned char out[16]) {
  XXH3_state_t* st = XXH3_createState();
  if (st == nullptr) return false;
  XXH3_128bits_reset(st);
  for (unsigned long at = 0; at < size; at += step) {
    const unsigned long n = size - at < step ? size - at : step;
    XXH3_128bits_update(st, data + at, n);
    if (after != nullptr) after(ctx, at, at + n);
  }
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st));
  XXH3_freeState(st);
  for (int i = 0; i < 16; ++i) out[i] = c.digest[i];
  return true;
}

}  // namespace qbc::mxq
