// The integer dot-product kernel under the executor's matmul: int16 activations (codes
// minus their zero point) against int8 weight rows, exact int32 sums. AVX2 (vpmaddwd) when
// the host has it, picked at run time, else portable loops; both give the same integers.
#pragma once

#include <cstdint>

namespace qbc::runtime {

/// The longest `len` for which dot_tile's int32 sums are exact when |x| <= 255 and
/// -128 <= w <= 127 (len * 255 * 128 < 2^31).
inline constexpr int64_t kMaxExactDotLen = 65536;

/// out[m * ldo + j * jstride] = Σ_{k < len} x[m * ldx + k] * w[j * ldw + k] for m < rows,
/// j < n, in int32 (exact for |x| <= 255 and len <= kMaxExactDotLen).
void dot_tile(const int16_t* x, int64_t ldx, int64_t rows, const int8_t* w, int64_t ldw, int64_t n,
              int64_t len, int32_t* out, int64_t ldo, int64_t jstride);

/// Whether dot_tile uses the AVX2 kernel on this host.
bool dot_tile_uses_avx2();

/// Whether dot_u8 has a VNNI kernel on this host (AVX-512 VNNI, vpdpbusd): then callers
/// prefer it to dot_tile. Off when the environment sets QBC_EXEC_NO_VNNI (to test the
/// other kernels on a VNNI host).
bool dot_u8_fast();

/// out[m * ldo + j] = Σ_{k < len} u[m * ldx + k] * w[j * ldw + k] for m < rows, j < n
/// (unsigned 8-bit u against int8 w), in int32: exact for len <= kMaxExactDotLen. With
/// `wsum` also wsum[j] = Σ_{k < len} w[j * ldw + k]. Callers turn int8 codes x into
/// u = x + 128 and subtract 128 · wsum. Portable loops when dot_u8_fast() is false.
void dot_u8(const uint8_t* u, int64_t ldx, int64_t rows, const int8_t* w, int64_t ldw, int64_t n,
            int64_t len, int32_t* out, int64_t ldo, int32_t* wsum);

/// Grouped dot_u8 (the int4 path's kernel: every group of a row in one call):
/// out[m * ldo + j * gt + g] = Σ_{k in group g} u[m * ldx + k] * w[j * ldw + k] and
/// wsum[j * gt + g] = Σ_{k in group g} w[j * ldw + k] for m < rows, j < n, g < gt =
/// ceil(len / group) (the last group may be short), in int32: the same integers as dot_u8
/// called once per group. AVX-512 VNNI for group 32 (eight groups reduced at once), else
/// portable loops.
void dot_u8_groups(const uint8_t* u, int64_t ldx, int64_t rows, const int8_t* w, int64_t ldw,
                   int64_t n, int64_t len, int64_t group, int32_t* out, int64_t ldo, int32_t* wsum);

/// out[m * ldo + c] = Σ_{j < keys} e[m * lde + j] * v[j * ldv + c] for m < rows, c < width
/// (unsigned 8-bit e against int8 rows v), in int32: exact for keys <= kMaxExactDotLen.
/// Attention's Σ e·v over value rows as stored, without transposing them: AVX-512 VNNI (four
/// keys a vpdpbusd) when dot_u8_fast(), else portable loops; the same integers.
void weighted_rows_u8(const uint8_t* e, int64_t lde, int64_t rows, const int8_t* v, int64_t ldv,
                      int64_t keys, int64_t width, int32_t* out, int64_t ldo);

}  // namespace qbc::runtime
