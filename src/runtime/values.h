// Element loads and stores of device memory: fp16 as IEEE half bit patterns (fp16_rows.h),
// int4 packed two per byte (low nibble first, sign-extended), every multi-byte type
// little-endian through memcpy (device memory is a byte array; offsets need not be aligned).
#pragma once

#include <cstdint>
#include <cstring>

#include "fp16_rows.h"
#include "qbc/isa/program.h"

namespace qbc::runtime {

/// `n` elements of T at p (memcpy: any alignment).
template <typename T>
inline void load(const uint8_t* p, int64_t n, T* out) {
  std::memcpy(out, p, static_cast<size_t>(n) * sizeof(T));
}
template <typename T>
inline void store(const T* v, int64_t n, uint8_t* p) {
  std::memcpy(p, v, static_cast<size_t>(n) * sizeof(T));
}

/// Integer codes [n] of type t (kI4, kI8 or kI16) at p, sign-extended.
inline void load_codes(const uint8_t* __restrict p, isa::DType t, int64_t n,
                       int32_t* __restrict out) {
  switch (t) {
    case isa::DType::kI4:  // a byte at a time: (v ^ 8) - 8 sign-extends a nibble v
      for (int64_t i = 0; i + 1 < n; i += 2) {
        const uint8_t b = p[i / 2];
        out[i] = ((b & 0xF) ^ 8) - 8;
        out[i + 1] = ((b >> 4) ^ 8) - 8;
      }
      if (n % 2 != 0) out[n - 1] = ((p[n / 2] & 0xF) ^ 8) - 8;
      return;
    case isa::DType::kI16:
      for (int64_t i = 0; i < n; ++i) {
        int16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        out[i] = v;
      }
      return;
    default:  // kI8 (validated by the caller)
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int8_t>(p[i]);
      return;
  }
}

/// Stores codes [n] (in range for t) as type t (kI4, kI8 or kI16) at p.
inline void store_codes(const int32_t* v, isa::DType t, int64_t n, uint8_t* p) {
  switch (t) {
    case isa::DType::kI4:
      for (int64_t i = 0; i < n; i += 2) {
        const uint8_t lo = static_cast<uint8_t>(v[i] & 0xF);
        const uint8_t hi = i + 1 < n ? static_cast<uint8_t>(v[i + 1] & 0xF) : 0;
        p[i / 2] = static_cast<uint8_t>(lo | (hi << 4));
      }
      return;
    case isa::DType::kI16:
      for (int64_t i = 0; i < n; ++i) {
        const int16_t c = static_cast<int16_t>(v[i]);
        std::memcpy(p + 2 * i, &c, 2);
      }
      return;
    default:
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(static_cast<int8_t>(v[i]));
      return;
  }
}

}  // namespace qbc::runtime
