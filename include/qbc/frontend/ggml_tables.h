// The data tables ggml's non-linear and i-quant types decode through (grids, sign patterns,
// non-linear levels), transcribed from llama.cpp's ggml/src/ggml-common.h (MIT License). Public
// because the per-type tests compute their expected values from the same published data.
#pragma once

#include <cstdint>

namespace qbc::frontend::ggml_tables {

/// IQ2_XXS: 256 groups of 8 magnitudes (bytes, each 8, 25 or 43).
extern const uint64_t kIq2xxsGrid[256];
/// IQ2_XS: 512 groups of 8 magnitudes.
extern const uint64_t kIq2xsGrid[512];
/// IQ2_S: 1024 groups of 8 magnitudes.
extern const uint64_t kIq2sGrid[1024];
/// IQ3_XXS: 256 groups of 4 magnitudes (bytes).
extern const uint32_t kIq3xxsGrid[256];
/// IQ3_S: 512 groups of 4 magnitudes.
extern const uint32_t kIq3sGrid[512];
/// IQ1_S and IQ1_M: 2048 groups of 8 signed bytes in {-1, 0, 1}.
extern const uint64_t kIq1sGrid[2048];
/// IQ4_NL and IQ4_XS: the 16 non-linear levels (ggml `kvalues_iq4nl`).
extern const int8_t kIq4nlValues[16];
/// MXFP4: the E2M1 values doubled (ggml `kvalues_mxfp4`); the E8M0 scale is halved to match.
extern const int8_t kMxfp4Values[16];

/// Byte k (bits 8k..8k+7) of a grid entry: element k of its group.
inline uint8_t grid_byte(uint64_t entry, int k) { return static_cast<uint8_t>(entry >> (8 * k)); }

/// The 8 signs of an IQ2/IQ3 group from its 7 stored bits: bit 7 makes the count of negative
/// signs even (ggml `ksigns_iq2xs[i]` = i | parity(i) << 7).
inline uint8_t iq_signs(uint32_t seven_bits) {
  return static_cast<uint8_t>(seven_bits | (__builtin_parity(seven_bits) << 7));
}

}  // namespace qbc::frontend::ggml_tables
