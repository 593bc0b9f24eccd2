// Vector loops of the executor that repeat numerics' fp32 expressions element by element in
// the same order (no reassociation, no fused multiply-add: the runtime builds with
// -ffp-contract=off), several elements at a time with AVX when the host has it. Each gives
// the bits of its scalar loop for every input (tests/unit/runtime/vec_kernels_test.cpp).
#pragma once

#include <cstdint>

namespace qbc::runtime {

/// Whether the host has AVX2 and QBC_EXEC_NO_AVX2 is unset (the vector paths below use it).
bool cpu_has_avx2();

/// corr[j] = Σ_c q[c] · kt[c * ld + j] for j < n: for each j the fp32 sum starting at 0.0f
/// and adding the fp32 products in channel order c = 0 .. hd − 1 (numerics::key_score's
/// rotating-offset correction of n keys, the keys' rows transposed into kt [hd, ld]).
void rot_corrections(const float* q, const float* kt, int64_t ld, int64_t hd, int64_t n,
                     float* corr);

/// v[j] = ((fsum[j] + part[j, 0]) + part[j, 1]) + ... + part[j, gt − 1] for j < n (without
/// `fsum`, starting from part[j, 0]): the fp32 sums of a grouped requant, part [n, gt] row-major,
/// in group order (numerics::qlinear). With AVX2 eight channels at a time, each lane adding its
/// channel's groups in order (8 x 8 blocks transposed in registers).
void sum_groups(const float* part, int64_t n, int64_t gt, const float* fsum, float* v);

/// One row of a grouped requant with int32 sums, straight from them (numerics::qlinear's fp32
/// order): for j < n and groups g < gt in order, part = fp32(acc[j·gt + g]) · fp32(xm ·
/// ws[j·ws_stride + g]); with float offsets (`wm` laid out like ws, `xsf` the row's code sums
/// per group as fp32) part = part + fp32(xsf[g] · fp32(xm · wm[j·ws_stride + g])); v[j] =
/// ((fsum[j] +) part_0) + part_1 + ... The bits of sum_groups over those parts. With AVX2
/// the parts of 8 channels x 8 groups are formed in registers and transposed, no buffer.
void grouped_requant(const int32_t* acc, int64_t n, int64_t gt, float xm, const float* ws,
                     int64_t ws_stride, const float* xsf, const float* wm, const float* fsum,
                     float* v);

/// grouped_requant without float offsets, the scales as IEEE binary16 bits at any alignment
/// (the compact image's fp16 scales as SRAM holds them), each widened exactly to fp32: the
/// bits of grouped_requant over the widened scales, without a widened copy per instruction.
void grouped_requant_f16(const int32_t* acc, int64_t n, int64_t gt, float xm, const uint8_t* ws,
                         int64_t ws_stride, const float* fsum, float* v);

/// The int4 matmul's corrections of one row, modulo 2^32 (exact int32 sums wrap the same way
/// in any order): for channels i < n and groups g < gt, e = i·gt + g,
/// out[e] = dots[e] − xz·ts[e] − off[e]·xs[g] (+ out[e] with `accumulate`); no off term
/// when `off` is null.
void group_corrections(const int32_t* dots, const int32_t* ts, const uint32_t* off,
                       const uint32_t* xs, uint32_t xz, int64_t n, int64_t gt, bool accumulate,
                       int32_t* out);

/// y[i] = numerics::round_fp16_bits(fp64(x[i]) · r · w[i]) for i < n: rms_norm's outputs, the
/// fp64 products in that order, each rounded once to fp16 (nearest even). With AVX2 four
/// lanes at a time on the fp64 bits (round_fp16_bits' fast path), a group with any lane
/// outside it (zero, subnormal or overflowing results, NaN) through round_fp16_bits itself.
void scale_round_fp16(const float* x, double r, const double* w, int64_t n, uint16_t* y);

/// y[i] = numerics::round_fp16_bits(v[i]) for i < n: fp64 values each rounded once to fp16
/// (nearest even), four lanes at a time with AVX2 as scale_round_fp16.
void round_fp16_rows(const double* v, int64_t n, uint16_t* y);

}  // namespace qbc::runtime
