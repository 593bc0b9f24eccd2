// The K-quants and ternary types decode to the values their published formulas give. Each test
// chooses the logical fields of a few blocks (fp16 super-scales including zero, negative zero,
// subnormals and negative values; sub-block scales, mins and codes over their whole range), packs
// them into bytes with a packer written from ggml-common.h's block layouts, computes every
// expected value from the chosen fields with the formula of ggml's dequantize_row_* (the same
// float operations in the same order, so the comparison is bit for bit), and decodes the bytes
// with gguf_decode_f32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ggml_block_packer.h"
#include "ggml_ref_quantizer.h"
#include "qbc/frontend/gguf.h"

namespace qbc::frontend {
namespace {

using ::qbc::testing::expect_decodes_to;
using ::qbc::testing::FieldSource;
using ::qbc::testing::half_value;
using ::qbc::testing::pack_q45_k;
using ::qbc::testing::pack_q6_k;
using ::qbc::testing::put;
using ::qbc::testing::put_bits;
using ::qbc::testing::q45_k_value;
using ::qbc::testing::q6_k_value;

constexpr int kBlocks = 12;  // Enough blocks to walk through all the fp16 edge cases.

// Byte and bit of 2-bit element e (0..255) in the qs of q2_K/q3_K: 128-element halves take 32
// bytes each; inside a half, the four 32-element quarters sit at bit shifts 0, 2, 4, 6.
size_t q2_byte(int e) { return 32 * (e / 128) + e % 32; }
int q2_shift(int e) { return 2 * ((e % 128) / 32); }

TEST(GgufDequantK, Q2K) {
  FieldSource src(2);
  std::string bytes;
  std::vector<float> expected;
  for (int b = 0; b < kBlocks; ++b) {
    std::string block(84, '\0');
    const uint16_t d = src.half(b), dmin = src.half(b + 3);
    put(block, 80, d);
    put(block, 82, dmin);
    int sc[16], mn[16], q[256];
    for (int j = 0; j < 16; ++j) {
      sc[j] = src.uniform(16);
      mn[j] = src.uniform(16);
      block[j] = static_cast<char>(sc[j] | (mn[j] << 4));
    }
    for (int e = 0; e < 256; ++e) {
      q[e] = src.uniform(4);
      put_bits(block, 16 + q2_byte(e), q2_shift(e), q[e]);
    }
    for (int e = 0; e < 256; ++e) {
      const float dl = half_value(d) * static_cast<float>(sc[e / 16]);
      const float ml = half_value(dmin) * static_cast<float>(mn[e / 16]);
      expected.push_back(dl * static_cast<float>(q[e]) - ml);
    }
    bytes += block;
  }
  expect_decodes_to(GgmlType::kQ2_K, bytes, expected);
}

TEST(GgufDequantK, Q3K) {
  FieldSource src(3);
  std::string bytes;
  std::vector<float> expected;
  for (int b = 0; b < kBlocks; ++b) {
    std::string block(110, '\0');
    const uint16_t d = src.half(b);
    put(block, 108, d);
    int scale[16], q[256];
    for (int j = 0; j < 16; ++j) {
      scale[j] = static_cast<int>(src.uniform(64)) - 32;  // six bits, stored + 32
      const int u = scale[j] + 32;
      put_bits(block, 96 + j % 8, j < 8 ? 0 : 4, u & 0xF);
      put_bits(block, 96 + 8 + j % 4, 2 * (j / 4), u >> 4);
    }
    for (int e = 0; e < 256; ++e) {
      q[e] = static_cast<int>(src.uniform(8)) - 4;  // low 2 bits in qs, "not minus 4" in hmask
      const int u = q[e] + 4;
      put_bits(block, 32 + q2_byte(e), q2_shift(e), u & 3);
      // hmask: byte e % 32, bit = index of the 32-element quarter in the block.
      put_bits(block, e % 32, e / 32, u >> 2);
    }
    for (int e = 0; e < 256; ++e) {
      const float dl = half_value(d) * static_cast<float>(scale[e / 16]);
      expected.push_back(dl * static_cast<float>(q[e]));
    }
    bytes += block;
  }
  expect_decodes_to(GgmlType::kQ3_K, bytes, expected);
}

void q45k_case(GgmlType type, int bits) {
  FieldSource src(static_cast<uint32_t>(bits));
  std::string bytes;
  std::vector<float> expected;
  for (int b = 0; b < kBlocks; ++b) {
    const uint16_t d = src.half(b), dmin = src.half(kBlocks - 1 - b);
    int sc[8], mn[8], q[256];
    for (int j = 0; j < 8; ++j) {
      sc[j] = src.uniform(64);
      mn[j] = src.uniform(64);
    }
    if (b == 0) sc[0] = mn[0] = 63, sc[7] = mn[7] = 63, sc[4] = 0;  // both top bits, and zero
    for (int e = 0; e < 256; ++e) q[e] = src.uniform(1u << bits);
    bytes += pack_q45_k(bits, d, dmin, sc, mn, q);
    for (int e = 0; e < 256; ++e) {
      expected.push_back(q45_k_value(d, dmin, sc[e / 32], mn[e / 32], q[e]));
    }
  }
  expect_decodes_to(type, bytes, expected);
}

TEST(GgufDequantK, Q4K) { q45k_case(GgmlType::kQ4_K, 4); }
TEST(GgufDequantK, Q5K) { q45k_case(GgmlType::kQ5_K, 5); }

TEST(GgufDequantK, Q6K) {
  FieldSource src(6);
  std::string bytes;
  std::vector<float> expected;
  for (int b = 0; b < kBlocks; ++b) {
    const uint16_t d = src.half(b);
    int sc[16], q[256];
    for (int j = 0; j < 16; ++j) sc[j] = static_cast<int>(src.uniform(256)) - 128;  // -128 too
    for (int e = 0; e < 256; ++e) q[e] = static_cast<int>(src.uniform(64)) - 32;
    bytes += pack_q6_k(d, sc, q);
    for (int e = 0; e < 256; ++e) expected.push_back(q6_k_value(d, sc[e / 16], q[e]));
  }
  expect_decodes_to(GgmlType::kQ6_K, bytes, expected);
}

TEST(GgufDequantK, Q8K) {
  FieldSource src(8);
  std::string bytes;
  std::vector<float> expected;
  const float scales[] = {0.0f, -0.0f, 1e-42f /* subnormal */, -3.5e-3f, 7.25f, 1e30f};
  for (float d : scales) {
    std::string block(292, '\0');
    put(block, 0, d);
    for (int e = 0; e < 256; ++e) {
      const int8_t q = static_cast<int8_t>(e - 128);  // every int8 value once
      put(block, 4 + e, q);
      expected.push_back(d * static_cast<float>(q));
    }
    for (int j = 0; j < 16; ++j) put(block, 260 + 2 * j, static_cast<int16_t>(src.uniform(4096)));
    bytes += block;
  }
  expect_decodes_to(GgmlType::kQ8_K, bytes, expected);
}

// The byte that holds base-3 digits t[0] (most significant) .. t[n - 1], followed by zeros up to
// five digits: ceil(value * 256 / 243), as ggml's quantize_row_tq1_0_ref stores them.
uint8_t tq1_byte(const int* t, int n) {
  int v = 0;
  for (int i = 0; i < 5; ++i) v = 3 * v + (i < n ? t[i] : 0);
  return static_cast<uint8_t>((v * 256 + 242) / 243);
}

TEST(GgufDequantK, TQ10) {
  FieldSource src(10);
  std::string bytes;
  std::vector<float> expected;
  for (int b = 0; b < kBlocks; ++b) {
    std::string block(54, '\0');
    const uint16_t d = src.half(b);
    put(block, 52, d);
    int t[256];  // trits 0, 1, 2 for -1, 0, +1
    for (int e = 0; e < 256; ++e) t[e] = src.uniform(3);
    if (b == 0) {
      for (int e = 0; e < 256; ++e) t[e] = 2;  // all +1: every byte at its largest value
    }
    // Elements 0..159: digit e / 32 of qs[e % 32]; 160..239: digit (e - 160) / 16 of
    // qs[32 + (e - 160) % 16]; 240..255: digit (e - 240) / 4 of qh[(e - 240) % 4].
    for (int m = 0; m < 32; ++m) {
      const int digits[5] = {t[m], t[32 + m], t[64 + m], t[96 + m], t[128 + m]};
      block[m] = static_cast<char>(tq1_byte(digits, 5));
    }
    for (int m = 0; m < 16; ++m) {
      const int digits[5] = {t[160 + m], t[176 + m], t[192 + m], t[208 + m], t[224 + m]};
      block[32 + m] = static_cast<char>(tq1_byte(digits, 5));
    }
    for (int j = 0; j < 4; ++j) {
      const int digits[4] = {t[240 + j], t[244 + j], t[248 + j], t[252 + j]};
      block[48 + j] = static_cast<char>(tq1_byte(digits, 4));
    }
    for (int e = 0; e < 256; ++e) expected.push_back(static_cast<float>(t[e] - 1) * half_value(d));
    bytes += block;
  }
  expect_decodes_to(GgmlType::kTQ1_0, bytes, expected);
}

TEST(GgufDequantK, TQ20) {
  FieldSource src(20);
  std::string bytes;
  std::vector<float> expected;
  for (int b = 0; b < kBlocks; ++b) {
    std::string block(66, '\0');
    const uint16_t d = src.half(b);
    put(block, 64, d);
    for (int e = 0; e < 256; ++e) {
      const int q = src.uniform(4);  // 3 is outside ggml's packer but decodes as +2
      // 128-element halves of 32 bytes; quarter (e % 128) / 32 at bit shift 2 * quarter.
      put_bits(block, 32 * (e / 128) + e % 32, 2 * ((e % 128) / 32), q);
      expected.push_back(static_cast<float>(q - 1) * half_value(d));
    }
    bytes += block;
  }
  expect_decodes_to(GgmlType::kTQ2_0, bytes, expected);
}

// The symmetric 32-element types multiply only, as ggml does: code 8 (q4_0) or 16 (q5_0) with a
// negative scale decodes to -0, not +0 (a "+ 0" for the missing minimum would lose the sign).
TEST(GgufDequantK, SymmetricLegacyTypesKeepTheSignOfZero) {
  std::string q4(18, '\0'), q5(22, '\0');
  put(q4, 0, uint16_t{0xBC00});  // d = -1
  put(q5, 0, uint16_t{0xBC00});
  for (int j = 0; j < 16; ++j) q4[2 + j] = static_cast<char>(0x88);  // every code 8
  put(q5, 2, uint32_t{0xFFFFFFFF});                                  // fifth bits set: codes 16
  expect_decodes_to(GgmlType::kQ4_0, q4, std::vector<float>(32, -0.0f));
  expect_decodes_to(GgmlType::kQ5_0, q5, std::vector<float>(32, -0.0f));
}

// Every quantized type refuses a byte count that is not its blocks' size, and an element count
// that is not a multiple of its block size, with an error naming the type.
TEST(GgufDequantK, WrongSizesAreRefused) {
  for (uint32_t id = 0; id < 64; ++id) {
    const GgmlTypeTraits* t = ggml_type_traits(id);
    if (t == nullptr || !t->decodable || t->block_size == 1) continue;
    std::string bytes(2 * t->type_size, '\0');
    std::vector<float> out(2 * t->block_size);
    const ByteSpan short_span{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size() - 1};
    Status s = gguf_decode_f32(t->type, short_span, 2 * t->block_size, out.data());
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << t->name;
    EXPECT_NE(s.message().find(std::string(t->name)), std::string::npos) << s.message();
    const ByteSpan span{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
    s = gguf_decode_f32(t->type, span, 2 * t->block_size - 1, out.data());
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << t->name;
    s = gguf_decode_f32(t->type, span, 2 * t->block_size, out.data());
    EXPECT_TRUE(s.ok()) << t->name << ": " << s.to_string();
  }
}

// The types found in published GGUF files are all decodable; the ones that are not are the
// dot-product intermediate Q8_1 and the integer types.
TEST(GgufDequantK, DecodableTypes) {
  for (uint32_t id = 0; id < 64; ++id) {
    const GgmlTypeTraits* t = ggml_type_traits(id);
    if (t == nullptr) continue;
    const bool integer = t->type == GgmlType::kI8 || t->type == GgmlType::kI16 ||
                         t->type == GgmlType::kI32 || t->type == GgmlType::kI64 ||
                         t->type == GgmlType::kF64;
    EXPECT_EQ(t->decodable, !integer && t->type != GgmlType::kQ8_1) << t->name;
  }
}

}  // namespace
}  // namespace qbc::frontend
