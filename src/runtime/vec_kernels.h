// Vector loops of the executor that repeat numerics' fp32 expressions element by element in
// the same order (no reassociation, no fused multiply-add: the runtime builds with
// -ffp-contract=off), several elements at a time with AVX when the host has it. Each gives
// the bits of its scalar loop for every input (tests/unit/runtime/vec_kernels_test.cpp).
#pragma once

#include <cstdint>

namespace qbc::runtime {

/// Whether the host has AVX2 (the vector paths below and the matmul kernel use it).
bool cpu_has_avx2();

/// corr[j] = Σ_c q[c] · kt[c * ld + j] for j < n: for each j the fp32 sum starting at 0.0f
/// and adding the fp32 products in channel order c = 0 .. hd − 1 (numerics::key_score's
/// rotating-offset correction of n keys, the keys' rows transposed into kt [hd, ld]).
void rot_corrections(const float* q, const float* kt, int64_t ld, int64_t hd, int64_t n,
                     float* corr);

}  // namespace qbc::runtime
