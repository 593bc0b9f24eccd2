// The AVX2 build of the section digest (digest_avx2.cpp). Plain types only: the .cpp is
// compiled with -mavx2 and must not instantiate anything shared with other files.
#pragma once

namespace qbc::mxq {

/// True when the host can run digest_avx2.
bool digest_avx2_usable();

/// XXH3-128 of data[0, size) in canonical byte order into out, hashed `step` bytes at a time,
/// after(ctx, lo, hi) called once each piece [lo, hi) is in. False when out of memory.
bool digest_avx2(const unsigned char* data, unsigned long size, unsigned long step,
                 void (*after)(void* ctx, unsigned long lo, unsigned long hi), void* ctx,
                 unsigned char out[16]);

}  // namespace qbc::mxq
