// The executor's int4 weight kernel: grouped dot products of int8 activation codes with packed
// signed 4-bit weights, read straight from their packed rows (no unpacked int8 copy). Three
// implementations give the same integers: AVX-512 VNNI (vpdpbusd, 128 codes a step), AVX2
// (vpmaddubsw + vpmaddwd, 64 codes a step) for groups that are multiples of 32, and portable
// loops for everything.
#pragma once

#include <cstdint>

namespace qbc::runtime {

enum class I4Kernel { kPortable, kAvx2, kVnni };

/// Whether `k` runs on this host (kPortable always; kVnni is off when the environment sets
/// QBC_EXEC_NO_VNNI, kAvx2 when it sets QBC_EXEC_NO_AVX2).
bool i4_kernel_available(I4Kernel k);

/// The kernel dot_i4_groups picks for `group`: VNNI, else AVX2, when available and `group` is a
/// multiple of 32; else portable.
I4Kernel i4_kernel_for(int64_t group);

/// For m < rows, j < n, g < gt = ceil(len / group) (the last group may be short):
///   out[m * ldo + j * gt + g] = Σ_{k in group g} x[m * ldx + k] * t(j, k)
///   tsum[j * gt + g]          = Σ_{k in group g} t(j, k)            (when tsum is not null)
/// where t(j, k) = w(j, k) + 8 in [0, 15] and w(j, k) is code k of weight row j: signed 4-bit,
/// two a byte, low nibble first, row j at w + j * ldw bytes. `len` is even. Exact int32 for
/// group <= 2^20. Callers recover Σ (x - xz)(w - wz) = Σ x t - xz Σ t - (8 + wz) Σ (x - xz).
void dot_i4_groups(const int8_t* x, int64_t ldx, int64_t rows, const uint8_t* w, int64_t ldw,
                   int64_t n, int64_t len, int64_t group, int32_t* out, int64_t ldo, int32_t* tsum);

/// dot_i4_groups on kernel `k` (which must be available and, unless portable, take `group`):
/// for tests that compare the implementations.
void dot_i4_groups_with(I4Kernel k, const int8_t* x, int64_t ldx, int64_t rows, const uint8_t* w,
                        int64_t ldw, int64_t n, int64_t len, int64_t group, int32_t* out,
                        int64_t ldo, int32_t* tsum);

}  // namespace qbc::runtime
