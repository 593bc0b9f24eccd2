// Rows of fp16 values between device memory (IEEE half bit patterns) and float: the
// conversions every vector instruction makes. F16C (vcvtph2ps / vcvtps2ph with
// round-to-nearest-even) when the host has it, else numerics' fp16_bits / fp16_from_bits;
// both give the same bits (tests/unit/runtime/fp16_rows_test.cpp).
#pragma once

#include <cstdint>

namespace qbc::runtime {

/// out[i] = the fp16 value at p + 2i, exactly.
void load_f16(const uint8_t* p, int64_t n, float* out);
/// Stores v[i] rounded once to fp16 (nearest even) at p + 2i; exact for fp16 values.
void store_f16(const float* v, int64_t n, uint8_t* p);
/// v[i] = numerics::round_fp16(v[i]) for fp32 values (store_f16 and load_f16 in place).
void round_f16(float* v, int64_t n);
/// Whether the F16C path is in use on this host.
bool fp16_rows_use_f16c();

}  // namespace qbc::runtime
