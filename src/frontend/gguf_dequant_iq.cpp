// Decoding of ggml's i-quants, IQ4_NL/IQ4_XS and MXFP4. Block layouts, from ggml-common.h (byte
// offsets in the block; u16/u32 little-endian):
//   iq2_xxs  66: d @0, qs[64] @2: per 32 weights, 4 grid bytes + u32 (4 x 7 sign bits, scale >> 28)
//   iq2_xs   74: d @0, u16 qs[32] @2 (9-bit grid index | 7 sign bits << 9), scales[8] @66
//   iq2_s    82: d @0, qs[32] @2 (grid low 8 bits), signs[32] @34, qh[8] @66, scales[8] @74
//   iq3_xxs  98: d @0, qs[64] @2 (grid indices), u32[8] @66 (4 x 7 sign bits, scale >> 28)
//   iq3_s   110: d @0, qs[64] @2, qh[8] @66 (grid bit 8), signs[32] @74, scales[4] @106
//   iq1_s    50: d @0, qs[32] @2 (grid low 8 bits), u16 qh[8] @34 (3 x 3 grid bits, scale, sign)
//   iq1_m    56: qs[32] @0, qh[16] @32, scales[8] @48 (u16 x 4; top nibbles form the fp16 d)
//   iq4_nl   18: d @0, qs[16] @2 (levels kvalues_iq4nl)
//   iq4_xs  136: d @0, u16 scales_h @2, scales_l[4] @4, qs[128] @8
//   mxfp4    17: E8M0 exponent @0, qs[16] @1 (E2M1 codes)
// The arithmetic follows ggml-quants.c's dequantize_row_* in the same order of float operations.
#include "gguf_blocks.h"
#include "qbc/frontend/ggml_tables.h"

namespace qbc::frontend::gguf_blocks {
namespace {

using ggml_tables::grid_byte;
using ggml_tables::iq_signs;

float f(int v) { return static_cast<float>(v); }
float sign(uint8_t signs, int j) { return (signs >> j) & 1 ? -1.f : 1.f; }

// Eight weights of an IQ2 group: db * magnitude * sign.
void iq2_group(float db, uint64_t grid, uint8_t signs, float* y) {
  for (int j = 0; j < 8; ++j) y[j] = db * f(grid_byte(grid, j)) * sign(signs, j);
}

void decode_iq2_xxs(const uint8_t* b, float* y) {
  const float d = load_fp16(b);
  for (int ib = 0; ib < 8; ++ib) {
    const uint8_t* q = b + 2 + 8 * ib;
    const uint32_t aux = load_u32(q + 4);
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.25f;
    for (int l = 0; l < 4; ++l) {
      iq2_group(db, ggml_tables::kIq2xxsGrid[q[l]], iq_signs((aux >> (7 * l)) & 127), y);
      y += 8;
    }
  }
}

void decode_iq2_xs(const uint8_t* b, float* y) {
  const float d = load_fp16(b);
  const uint8_t* scales = b + 66;
  for (int ib = 0; ib < 8; ++ib) {
    const float db[2] = {d * (0.5f + f(scales[ib] & 0xF)) * 0.25f,
                         d * (0.5f + f(scales[ib] >> 4)) * 0.25f};
    for (int l = 0; l < 4; ++l) {
      const uint16_t q = load_u16(b + 2 + 2 * (4 * ib + l));
      iq2_group(db[l / 2], ggml_tables::kIq2xsGrid[q & 511], iq_signs(q >> 9), y);
      y += 8;
    }
  }
}

void decode_iq2_s(const uint8_t* b, float* y) {
  const float d = load_fp16(b);
  const uint8_t* qs = b + 2;
  const uint8_t* signs = b + 34;
  const uint8_t* qh = b + 66;
  const uint8_t* scales = b + 74;
  for (int ib = 0; ib < 8; ++ib) {
    const float db[2] = {d * (0.5f + f(scales[ib] & 0xF)) * 0.25f,
                         d * (0.5f + f(scales[ib] >> 4)) * 0.25f};
    for (int l = 0; l < 4; ++l) {
      const int index = qs[4 * ib + l] | ((qh[ib] << (8 - 2 * l)) & 0x300);
      iq2_group(db[l / 2], ggml_tables::kIq2sGrid[index], signs[4 * ib + l], y);
      y += 8;
    }
  }
}

// Eight weights of an IQ3 group: two grid entries of 4 magnitudes, 8 signs.
void iq3_group(float db, uint32_t grid1, uint32_t grid2, uint8_t signs, float* y) {
  for (int j = 0; j < 4; ++j) {
    y[j] = db * f(grid_byte(grid1, j)) * sign(signs, j);
    y[j + 4] = db * f(grid_byte(grid2, j)) * sign(signs, j + 4);
  }
}

void decode_iq3_xxs(const uint8_t* b, float* y) {
  const float d = load_fp16(b);
  const uint8_t* qs = b + 2;
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t aux = load_u32(b + 66 + 4 * ib);
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
    for (int l = 0; l < 4; ++l) {
      iq3_group(db, ggml_tables::kIq3xxsGrid[qs[2 * l]], ggml_tables::kIq3xxsGrid[qs[2 * l + 1]],
                iq_signs((aux >> (7 * l)) & 127), y);
      y += 8;
    }
    qs += 8;
  }
}

void decode_iq3_s(const uint8_t* b, float* y) {
  const float d = load_fp16(b);
  const uint8_t* qs = b + 2;
  const uint8_t* qh = b + 66;
  const uint8_t* signs = b + 74;
  const uint8_t* scales = b + 106;
  for (int ib = 0; ib < 8; ++ib) {  // Blocks of 32 weights; a scale byte serves two.
    const int nibble = ib % 2 == 0 ? (scales[ib / 2] & 0xF) : (scales[ib / 2] >> 4);
    const float db = d * f(1 + 2 * nibble);
    for (int l = 0; l < 4; ++l) {
      const int i1 = qs[2 * l] | ((qh[ib] << (8 - 2 * l)) & 256);
      const int i2 = qs[2 * l + 1] | ((qh[ib] << (7 - 2 * l)) & 256);
      iq3_group(db, ggml_tables::kIq3sGrid[i1], ggml_tables::kIq3sGrid[i2], signs[l], y);
      y += 8;
    }
    qs += 8;
    signs += 4;
  }
}

// Eight weights of an IQ1 group: dl * (grid value in {-1, 0, 1} + delta).
void iq1_group(float dl, uint64_t grid, float delta, float* y) {
  for (int j = 0; j < 8; ++j) {
    y[j] = dl * (f(static_cast<int8_t>(grid_byte(grid, j))) + delta);
  }
}

constexpr float kIq1Delta = 0.125f;  // ggml IQ1S_DELTA (= IQ1M_DELTA)

void decode_iq1_s(const uint8_t* b, float* y) {
  const float d = load_fp16(b);
  const uint8_t* qs = b + 2;
  for (int ib = 0; ib < 8; ++ib) {
    const uint16_t qh = load_u16(b + 34 + 2 * ib);
    const float dl = d * f(2 * ((qh >> 12) & 7) + 1);
    const float delta = qh & 0x8000 ? -kIq1Delta : kIq1Delta;
    for (int l = 0; l < 4; ++l) {
      iq1_group(dl, ggml_tables::kIq1sGrid[qs[l] | (((qh >> (3 * l)) & 7) << 8)], delta, y);
      y += 8;
    }
    qs += 4;
  }
}

void decode_iq1_m(const uint8_t* b, float* y) {
  const uint8_t* qs = b;
  const uint8_t* qh = b + 32;
  uint16_t sc[4];
  for (int i = 0; i < 4; ++i) sc[i] = load_u16(b + 48 + 2 * i);
  const uint16_t d_bits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) |
                                                ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
  const float d = tensorfile::fp16_to_f32(d_bits);
  for (int ib = 0; ib < 8; ++ib) {
    const int shift = 6 * (ib % 2);
    const float dl1 = d * f(2 * ((sc[ib / 2] >> shift) & 7) + 1);
    const float dl2 = d * f(2 * ((sc[ib / 2] >> (shift + 3)) & 7) + 1);
    const int index[4] = {qs[0] | ((qh[0] << 8) & 0x700), qs[1] | ((qh[0] << 4) & 0x700),
                          qs[2] | ((qh[1] << 8) & 0x700), qs[3] | ((qh[1] << 4) & 0x700)};
    const float delta[4] = {
        qh[0] & 0x08 ? -kIq1Delta : kIq1Delta, qh[0] & 0x80 ? -kIq1Delta : kIq1Delta,
        qh[1] & 0x08 ? -kIq1Delta : kIq1Delta, qh[1] & 0x80 ? -kIq1Delta : kIq1Delta};
    for (int l = 0; l < 4; ++l) {
      iq1_group(l < 2 ? dl1 : dl2, ggml_tables::kIq1sGrid[index[l]], delta[l], y);
      y += 8;
    }
    qs += 4;
    qh += 2;
  }
}

// 32 weights from 16 bytes of 4-bit level indices: low nibbles first, then high nibbles.
void nl_levels(const uint8_t* qs, float d, const int8_t* levels, float* y) {
  for (int j = 0; j < 16; ++j) {
    y[j] = d * f(levels[qs[j] & 0xF]);
    y[j + 16] = d * f(levels[qs[j] >> 4]);
  }
}

void decode_iq4_nl(const uint8_t* b, float* y) {
  nl_levels(b + 2, load_fp16(b), ggml_tables::kIq4nlValues, y);
}

void decode_iq4_xs(const uint8_t* b, float* y) {
  const float d = load_fp16(b);
  const uint16_t scales_h = load_u16(b + 2);
  const uint8_t* scales_l = b + 4;
  for (int ib = 0; ib < 8; ++ib) {
    const int ls =
        ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
    nl_levels(b + 8 + 16 * ib, d * f(ls - 32), ggml_tables::kIq4nlValues, y + 32 * ib);
  }
}

// Half of the E8M0 scale 2^(e - 127), as ggml_e8m0_to_fp32_half builds it from bits (e = 0 and 1
// give the subnormals 2^-128 and 2^-127; 255 gives 2^127, not NaN).
float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

void decode_mxfp4(const uint8_t* b, float* y) {
  const float d = e8m0_half(b[0]);
  for (int j = 0; j < 16; ++j) {
    y[j] = f(ggml_tables::kMxfp4Values[b[1 + j] & 0x0F]) * d;
    y[j + 16] = f(ggml_tables::kMxfp4Values[b[1 + j] >> 4]) * d;
  }
}

}  // namespace

BlockDecoder iq_decoder(GgmlType type) {
  switch (type) {
    case GgmlType::kIQ2_XXS:
      return decode_iq2_xxs;
    case GgmlType::kIQ2_XS:
      return decode_iq2_xs;
    case GgmlType::kIQ2_S:
      return decode_iq2_s;
    case GgmlType::kIQ3_XXS:
      return decode_iq3_xxs;
    case GgmlType::kIQ3_S:
      return decode_iq3_s;
    case GgmlType::kIQ1_S:
      return decode_iq1_s;
    case GgmlType::kIQ1_M:
      return decode_iq1_m;
    case GgmlType::kIQ4_NL:
      return decode_iq4_nl;
    case GgmlType::kIQ4_XS:
      return decode_iq4_xs;
    case GgmlType::kMXFP4:
      return decode_mxfp4;
    default:
      return nullptr;
  }
}

}  // namespace qbc::frontend::gguf_blocks
