// The AVX2 build of the XXH3-128 digest (digest_avx2.cpp). Plain types only: the .cpp is
// compiled with -mavx2 and must not instantiate anything shared with other files.
#pragma once

namespace qbc::mxq {

/// True when the host can run the functions below.
bool digest_avx2_usable();

/// A streaming digest: begin (nullptr when out of memory), update any number of times, end
/// (writes the canonical 16 bytes and frees the state).
void* digest_avx2_begin();
void digest_avx2_update(void* state, const unsigned char* data, unsigned long size);
void digest_avx2_end(void* state, unsigned char out[16]);

}  // namespace qbc::mxq
