// XXH3-128 with the AVX2 kernels (Debian's libxxhash is built for SSE2), for the section and
// file digests of large files: the same digest, about twice as fast. This file alone is
// compiled with -mavx2 (src/mxq/CMakeLists.txt) and includes nothing but xxhash.h, whose
// functions become static here (XXH_INLINE_ALL), so no AVX2 code can stand in for a function
// of another file; callers check the CPU first (digest_avx2_usable).
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

void* digest_avx2_begin() {
  XXH3_state_t* st = XXH3_createState();
  if (st != nullptr) XXH3_128bits_reset(st);
  return st;
}

void digest_avx2_update(void* state, const unsigned char* data, unsigned long size) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state), data, size);
}

void digest_avx2_end(void* state, unsigned char out[16]) {
  XXH3_state_t* st = static_cast<XXH3_state_t*>(state);
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st));
  XXH3_freeState(st);
  for (int i = 0; i < 16; ++i) out[i] = c.digest[i];
}

}  // namespace qbc::mxq
