// Decoding of ggml's K-quants (super-blocks of 256) and ternary types. Block layouts, from
// ggml-common.h (byte offsets in the block):
//   q2_K  84: scales[16] @0 (low nibble scale, high nibble min), qs[64] @16, d @80, dmin @82
//   q3_K 110: hmask[32] @0, qs[64] @32, scales[12] @96 (16 six-bit scales), d @108
//   q4_K 144: d @0, dmin @2, scales[12] @4 (8 six-bit scales + 8 mins), qs[128] @16
//   q5_K 176: d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48
//   q6_K 210: ql[128] @0, qh[64] @128, int8 scales[16] @192, d @208
//   q8_K 292: float d @0, int8 qs[256] @4, int16 bsums[16] @260 (bsums unused)
//   tq1_0 54: qs[48] @0 (5 base-3 digits a byte), qh[4] @48 (4 digits a byte), d @52
//   tq2_0 66: qs[64] @0 (2 bits each), d @64
// The arithmetic follows ggml-quants.c's dequantize_row_* in the same order of float operations
// (for example q4_K is (d * sc) * q - (dmin * m), each product rounded to float).
#include "gguf_blocks.h"

namespace qbc::frontend::gguf_blocks {
namespace {

constexpr int kQK = 256;

float f(int v) { return static_cast<float>(v); }

void decode_q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = load_fp16(b + 80);
  const float dmin = load_fp16(b + 82);
  int is = 0;
  for (int n = 0; n < kQK; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = scales[is++];
        const float dl = d * f(sc & 0xF);
        const float ml = dmin * f(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * f((q[l + 16 * half] >> shift) & 3) - ml;
      }
    }
    q += 32;
  }
}

// The 16 six-bit scales of q3_K: low 4 bits in the nibbles of bytes 0..7 (low nibbles first),
// high 2 bits in bytes 8..11 (scale j uses bits 2*(j/4) of byte 8 + j%4).
void q3_k_scales(const uint8_t* s, int* out) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
    const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = (low | (high << 4)) - 32;
  }
}

void decode_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hm = b;
  const uint8_t* q = b + 32;
  int scales[16];
  q3_k_scales(b + 96, scales);
  const float d_all = load_fp16(b + 108);
  int is = 0;
  uint8_t m = 1;  // The hmask bit runs on across both halves of the block.
  for (int n = 0; n < kQK; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d_all * f(scales[is++]);
        for (int l = 0; l < 16; ++l) {
          const int idx = l + 16 * half;
          *y++ = dl * f(((q[idx] >> shift) & 3) - ((hm[idx] & m) ? 0 : 4));
        }
      }
      m = static_cast<uint8_t>(m << 1);
    }
    q += 32;
  }
}

// ggml's get_scale_min_k4: scale and min j (0..7) of the 12 packed bytes of q4_K/q5_K.
void scale_min_k4(int j, const uint8_t* s, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// q4_K (qh == nullptr) and q5_K: four chunks of 64; chunk c's 32 bytes hold sub-block 2c in
// the low nibbles and 2c+1 in the high nibbles; q5_K's fifth bits are bits 2c / 2c+1 of qh[l].
void decode_q45_k(const uint8_t* b, const uint8_t* qh, const uint8_t* q, float* y) {
  const float d = load_fp16(b);
  const float dmin = load_fp16(b + 2);
  for (int c = 0; c < 4; ++c) {
    int sc = 0, mn = 0;
    scale_min_k4(2 * c, b + 4, &sc, &mn);
    const float d1 = d * f(sc);
    const float m1 = dmin * f(mn);
    scale_min_k4(2 * c + 1, b + 4, &sc, &mn);
    const float d2 = d * f(sc);
    const float m2 = dmin * f(mn);
    const int u1 = 1 << (2 * c), u2 = 2 << (2 * c);
    for (int l = 0; l < 32; ++l) {
      const int hi = (qh != nullptr && (qh[l] & u1)) ? 16 : 0;
      *y++ = d1 * f((q[l] & 0xF) + hi) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      const int hi = (qh != nullptr && (qh[l] & u2)) ? 16 : 0;
      *y++ = d2 * f((q[l] >> 4) + hi) - m2;
    }
    q += 32;
  }
}

void decode_q4_k(const uint8_t* b, float* y) { decode_q45_k(b, nullptr, b + 16, y); }
void decode_q5_k(const uint8_t* b, float* y) { decode_q45_k(b, b + 16, b + 48, y); }

void decode_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = load_fp16(b + 208);
  for (int n = 0; n < kQK; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * f(sc[is]) * f(q1);
      y[l + 32] = d * f(sc[is + 2]) * f(q2);
      y[l + 64] = d * f(sc[is + 4]) * f(q3);
      y[l + 96] = d * f(sc[is + 6]) * f(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

void decode_q8_k(const uint8_t* b, float* y) {
  float d;
  std::memcpy(&d, b, sizeof(d));
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + 4);
  for (int j = 0; j < kQK; ++j) y[j] = d * f(qs[j]);
}

// One base-3 digit of a tq1_0 byte: the byte holds ceil(digits * 256 / 243), so multiplying by
// 3^n moves digit n to the top and (q * 3) >> 8 reads it.
float tq1_digit(uint8_t byte, int n, float d) {
  static constexpr uint8_t kPow3[6] = {1, 3, 9, 27, 81, 243};
  const uint8_t q = static_cast<uint8_t>(byte * kPow3[n]);
  const int xi = (static_cast<uint16_t>(q) * 3) >> 8;
  return f(xi - 1) * d;
}

void decode_tq1_0(const uint8_t* b, float* y) {
  const uint8_t* qs = b;
  const uint8_t* qh = b + 48;
  const float d = load_fp16(b + 52);
  for (int n = 0; n < 5; ++n) {
    for (int m = 0; m < 32; ++m) *y++ = tq1_digit(qs[m], n, d);
  }
  for (int n = 0; n < 5; ++n) {
    for (int m = 0; m < 16; ++m) *y++ = tq1_digit(qs[32 + m], n, d);
  }
  for (int n = 0; n < 4; ++n) {
    for (int j = 0; j < 4; ++j) *y++ = tq1_digit(qh[j], n, d);
  }
}

void decode_tq2_0(const uint8_t* b, float* y) {
  const float d = load_fp16(b + 64);
  for (int j = 0; j < 64; j += 32) {
    for (int l = 0; l < 4; ++l) {
      for (int m = 0; m < 32; ++m) *y++ = f(((b[j + m] >> (2 * l)) & 3) - 1) * d;
    }
  }
}

}  // namespace

BlockDecoder k_quant_decoder(GgmlType type) {
  switch (type) {
    case GgmlType::kQ2_K:
      return decode_q2_k;
    case GgmlType::kQ3_K:
      return decode_q3_k;
    case GgmlType::kQ4_K:
      return decode_q4_k;
    case GgmlType::kQ5_K:
      return decode_q5_k;
    case GgmlType::kQ6_K:
      return decode_q6_k;
    case GgmlType::kQ8_K:
      return decode_q8_k;
    case GgmlType::kTQ1_0:
      return decode_tq1_0;
    case GgmlType::kTQ2_0:
      return decode_tq2_0;
    default:
      return nullptr;
  }
}

}  // namespace qbc::frontend::gguf_blocks
