// The tests' own reference quantizer for the K-quants GGUF files carry most (Q4_K, Q5_K, Q6_K),
// written from the block layouts of ggml-common.h and the formulas of ggml's dequantize_row_*:
// it chooses the fields of each 256-element super-block (a plain min/max fit, not llama.cpp's
// search), packs them, and returns the bytes together with the values the formula gives for the
// chosen fields. Those values are the "dequantized float model" a decoder must reproduce.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ggml_block_packer.h"
#include "qbc/frontend/gguf.h"

namespace qbc::testing {

/// fp16 bits of a value near `v` (truncated toward zero; |v| in fp16's normal range, or 0).
inline uint16_t to_half_bits(float v) {
  if (v == 0.0f) return 0;
  int e = 0;
  const double m = std::frexp(std::fabs(static_cast<double>(v)), &e);  // v = m * 2^e, m in [.5, 1)
  const int exponent = e - 1 + 15;
  const int fraction = static_cast<int>((2.0 * m - 1.0) * 1024.0);
  const uint16_t sign = v < 0 ? 0x8000 : 0;
  return static_cast<uint16_t>(sign | (std::clamp(exponent, 1, 30) << 10) | fraction);
}

/// Packs one q4_K (bits 4) or q5_K (bits 5) super-block from its fields: fp16 d and dmin, eight
/// 6-bit scales and mins, 256 codes. Element e belongs to sub-block e / 32; its low 4 bits sit in
/// byte 32 * (e / 64) + e % 32 of qs (low nibble for the first 32 of each 64, high nibble for
/// the next 32) and, for q5_K, its fifth bit in bit e / 32 of qh[e % 32]. Scales and mins of
/// sub-blocks 0..3 take the low 6 bits of bytes 0..3 / 4..7; those of 4..7 the nibbles of bytes
/// 8..11 and the top 2 bits of bytes 0..3 / 4..7.
inline std::string pack_q45_k(int bits, uint16_t d, uint16_t dmin, const int* sc, const int* mn,
                              const int* q) {
  std::string block(bits == 4 ? 144 : 176, '\0');
  const size_t qs_at = bits == 4 ? 16 : 48;
  put(block, 0, d);
  put(block, 2, dmin);
  for (int j = 0; j < 4; ++j) {
    put_bits(block, 4 + j, 0, sc[j]);
    put_bits(block, 8 + j, 0, mn[j]);
    put_bits(block, 12 + j, 0, sc[4 + j] & 0xF);
    put_bits(block, 12 + j, 4, mn[4 + j] & 0xF);
    put_bits(block, 4 + j, 6, sc[4 + j] >> 4);
    put_bits(block, 8 + j, 6, mn[4 + j] >> 4);
  }
  for (int e = 0; e < 256; ++e) {
    put_bits(block, qs_at + 32 * (e / 64) + e % 32, (e % 64) < 32 ? 0 : 4, q[e] & 0xF);
    if (bits == 5) put_bits(block, 16 + e % 32, e / 32, q[e] >> 4);
  }
  return block;
}

/// The q4_K/q5_K value of element e: (d * sc) * q - (dmin * m), each product rounded to float.
inline float q45_k_value(uint16_t d, uint16_t dmin, int sc, int mn, int q) {
  return half_value(d) * static_cast<float>(sc) * static_cast<float>(q) -
         half_value(dmin) * static_cast<float>(mn);
}

/// Packs one q6_K super-block: fp16 d, sixteen int8 scales (sub-blocks of 16), 256 codes in
/// -32..31 stored + 32. Halves of 128 take ql[64 h ..] and qh[32 h ..]; quarter k (32 elements)
/// of a half sits in ql byte l + 32 (k % 2) (low nibble for k < 2) and bits 2k of qh byte l.
inline std::string pack_q6_k(uint16_t d, const int* sc, const int* q) {
  std::string block(210, '\0');
  put(block, 208, d);
  for (int j = 0; j < 16; ++j) put(block, 192 + j, static_cast<int8_t>(sc[j]));
  for (int e = 0; e < 256; ++e) {
    const int u = q[e] + 32, h = e / 128, k = (e % 128) / 32, l = e % 32;
    put_bits(block, 64 * h + l + 32 * (k % 2), k < 2 ? 0 : 4, u & 0xF);
    put_bits(block, 128 + 32 * h + l, 2 * k, u >> 4);
  }
  return block;
}

/// The q6_K value: (d * sc) * q.
inline float q6_k_value(uint16_t d, int sc, int q) {
  return half_value(d) * static_cast<float>(sc) * static_cast<float>(q);
}

/// Bytes of a tensor and the values its fields decode to by the formula.
struct RefQuantized {
  std::string bytes;
  std::vector<float> values;
};

inline int round_clamp(double v, int lo, int hi) {
  return std::clamp(static_cast<int>(std::lround(v)), lo, hi);
}

/// Quantizes `x` (a multiple of 256 values, row-major) to q4_K (bits 4) or q5_K (bits 5): per
/// sub-block of 32 an affine fit over [min(0, min x), max x].
inline RefQuantized ref_quantize_q45_k(const std::vector<float>& x, int bits) {
  RefQuantized out;
  const int nmax = (1 << bits) - 1;
  for (size_t at = 0; at < x.size(); at += 256) {
    double scale[8], min[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
      const auto [lo, hi] =
          std::minmax_element(x.begin() + at + 32 * j, x.begin() + at + 32 * j + 32);
      min[j] = -std::min(0.0, static_cast<double>(*lo));
      scale[j] = (std::max(0.0, static_cast<double>(*hi)) + min[j]) / nmax;
      max_scale = std::max(max_scale, scale[j]);
      max_min = std::max(max_min, min[j]);
    }
    const uint16_t d = to_half_bits(static_cast<float>(max_scale / 63));
    const uint16_t dmin = to_half_bits(static_cast<float>(max_min / 63));
    int sc[8], mn[8], q[256];
    for (int j = 0; j < 8; ++j) {
      sc[j] = half_value(d) > 0 ? round_clamp(scale[j] / half_value(d), 0, 63) : 0;
      mn[j] = half_value(dmin) > 0 ? round_clamp(min[j] / half_value(dmin), 0, 63) : 0;
    }
    for (int e = 0; e < 256; ++e) {
      const double step = static_cast<double>(half_value(d)) * sc[e / 32];
      const double offset = static_cast<double>(half_value(dmin)) * mn[e / 32];
      q[e] = step > 0 ? round_clamp((x[at + e] + offset) / step, 0, nmax) : 0;
      out.values.push_back(q45_k_value(d, dmin, sc[e / 32], mn[e / 32], q[e]));
    }
    out.bytes += pack_q45_k(bits, d, dmin, sc, mn, q);
  }
  return out;
}

/// Quantizes `x` to q6_K: per sub-block of 16 a symmetric scale max|x| / 31.
inline RefQuantized ref_quantize_q6_k(const std::vector<float>& x) {
  RefQuantized out;
  for (size_t at = 0; at < x.size(); at += 256) {
    double scale[16], max_scale = 0;
    for (int j = 0; j < 16; ++j) {
      double amax = 0;
      for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(double{x[at + 16 * j + i]}));
      scale[j] = amax / 31;
      max_scale = std::max(max_scale, scale[j]);
    }
    const uint16_t d = to_half_bits(static_cast<float>(max_scale / 127));
    int sc[16], q[256];
    for (int j = 0; j < 16; ++j) {
      sc[j] = half_value(d) > 0 ? round_clamp(scale[j] / half_value(d), -128, 127) : 0;
    }
    for (int e = 0; e < 256; ++e) {
      const double step = static_cast<double>(half_value(d)) * sc[e / 16];
      q[e] = step > 0 ? round_clamp(x[at + e] / step, -32, 31) : 0;
      out.values.push_back(q6_k_value(d, sc[e / 16], q[e]));
    }
    out.bytes += pack_q6_k(d, sc, q);
  }
  return out;
}

/// The fields of one 32-element block of Q8_0, Q5_0, Q4_0, Q4_1 or Q5_1 as the quantizer chose
/// them.
struct Block32 {
  uint16_t d = 0, m = 0;  ///< fp16 scale, and Q4_1 / Q5_1's fp16 minimum
  int q[32] = {};         ///< stored codes: Q8_0 signed, the others unsigned
};

/// Quantizes `x` (a multiple of 32 values) block by block as ggml's quantize_row_*_ref does
/// (ggml-quants.c): Q8_0 d = amax / 127, q = round(x / d); Q4_0 and Q5_0 d = max / -8 (-16)
/// where max is the value of largest magnitude, q = min(15 (31), (int8)(x / d + 8.5 (16.5)));
/// Q4_1 d = (max - min) / 15, m = min, q = min(15, (int8)((x - min) / d + 0.5)); Q5_1
/// d = (max - min) / 31, m = min, q = (uint8)((x - min) / d + 0.5). Packs the blocks
/// (ggml-common.h: block_q8_0 {d, qs[32]}, block_q4_0 {d, qs[16]}, block_q5_0 {d, qh[4],
/// qs[16]}, block_q4_1 {d, m, qs[16]}, block_q5_1 {d, m, qh[4], qs[16]}; nibble j holds element
/// j low and j + 16 high, the fifth bits in bit j of qh) and returns their values by ggml's
/// dequantize_row_*: q * d, (q - 8) * d, (q - 16) * d, q * d + m. `blocks` receives the fields
/// when given.
inline RefQuantized ref_quantize_block32(frontend::GgmlType type, const std::vector<float>& x,
                                         std::vector<Block32>* blocks = nullptr) {
  using frontend::GgmlType;
  RefQuantized out;
  for (size_t at = 0; at + 32 <= x.size(); at += 32) {
    const float* v = x.data() + at;
    Block32 b;
    float amax = 0, max = 0, lo = v[0], hi = v[0];
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(v[j])) {
        amax = std::fabs(v[j]);
        max = v[j];
      }
      lo = std::min(lo, v[j]);
      hi = std::max(hi, v[j]);
    }
    const bool with_min = type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1;
    const int offset = type == GgmlType::kQ4_0 ? 8 : type == GgmlType::kQ5_0 ? 16 : 0;
    const int top = type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1 ? 31 : 15;
    float d = type == GgmlType::kQ8_0 ? amax / 127
              : with_min              ? (hi - lo) / static_cast<float>(top)
                                      : max / static_cast<float>(-offset);
    const float id = d != 0 ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; ++j) {
      if (type == GgmlType::kQ8_0) {
        b.q[j] = static_cast<int>(std::round(v[j] * id));
      } else if (type == GgmlType::kQ4_1) {
        b.q[j] = std::min(15, static_cast<int>(static_cast<int8_t>((v[j] - lo) * id + 0.5f)));
      } else if (type == GgmlType::kQ5_1) {
        b.q[j] = static_cast<int>(static_cast<uint8_t>((v[j] - lo) * id + 0.5f));
      } else {
        b.q[j] = std::min(top, static_cast<int>(static_cast<int8_t>(v[j] * id + offset + 0.5f)));
      }
    }
    b.d = to_half_bits(d);
    b.m = to_half_bits(lo);
    std::string bytes(reinterpret_cast<const char*>(&b.d), 2);
    if (with_min) bytes.append(reinterpret_cast<const char*>(&b.m), 2);
    if (type == GgmlType::kQ8_0) {
      for (int j = 0; j < 32; ++j) bytes.push_back(static_cast<char>(static_cast<int8_t>(b.q[j])));
    } else {
      if (type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1) {
        uint32_t qh = 0;
        for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>((b.q[j] >> 4) & 1) << j;
        bytes.append(reinterpret_cast<const char*>(&qh), 4);
      }
      for (int j = 0; j < 16; ++j) {
        bytes.push_back(static_cast<char>((b.q[j] & 0xF) | ((b.q[j + 16] & 0xF) << 4)));
      }
    }
    out.bytes += bytes;
    const float dv = half_value(b.d), mv = half_value(b.m);
    for (int j = 0; j < 32; ++j) {
      out.values.push_back(with_min ? static_cast<float>(b.q[j]) * dv + mv
                                    : static_cast<float>(b.q[j] - offset) * dv);
    }
    if (blocks) blocks->push_back(b);
  }
  return out;
}

/// `x` in `type` (F32, Q4_K, Q5_K, Q6_K, Q8_0, Q5_0, Q4_0, Q4_1 or Q5_1).
inline RefQuantized ref_quantize(frontend::GgmlType type, const std::vector<float>& x) {
  switch (type) {
    case frontend::GgmlType::kQ4_K:
      return ref_quantize_q45_k(x, 4);
    case frontend::GgmlType::kQ5_K:
      return ref_quantize_q45_k(x, 5);
    case frontend::GgmlType::kQ6_K:
      return ref_quantize_q6_k(x);
    case frontend::GgmlType::kQ8_0:
    case frontend::GgmlType::kQ5_0:
    case frontend::GgmlType::kQ4_0:
    case frontend::GgmlType::kQ4_1:
    case frontend::GgmlType::kQ5_1:
      return ref_quantize_block32(type, x);
    default:
      return {std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4), x};
  }
}

}  // namespace qbc::testing
