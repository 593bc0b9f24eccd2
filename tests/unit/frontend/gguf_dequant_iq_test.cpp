// The i-quants, IQ4_NL/IQ4_XS and MXFP4 decode to the values their published formulas give. As
// in gguf_dequant_k_test.cpp, each test chooses the logical fields (fp16 scales with the edge
// cases, sub-block scales, grid indices, every one of the 128 stored sign patterns and both
// delta signs), packs them from ggml-common.h's block layouts and compares the decoded values
// bit for bit with the formula of ggml's dequantize_row_*. The grids are published data; the
// tests read them from qbc's transcription, which GridTables checks against digests computed
// from ggml-common.h itself. The IQ4 levels and the E2M1 values are spelled out here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ggml_block_packer.h"
#include "qbc/frontend/ggml_tables.h"
#include "qbc/frontend/gguf.h"

namespace qbc::frontend {
namespace {

namespace tables = ::qbc::frontend::ggml_tables;
using ::qbc::testing::expect_decodes_to;
using ::qbc::testing::FieldSource;
using ::qbc::testing::half_value;
using ::qbc::testing::put;
using ::qbc::testing::put_bits;

constexpr int kBlocks = 12;  // 96 groups of 8 per block type with 8 groups per 32: > 128 signs

uint8_t byte_of(uint64_t entry, int k) { return static_cast<uint8_t>(entry >> (8 * k)); }

// The 8 signs of a group from the 7 stored bits: the eighth makes the number of minus signs
// even (the IQ2_XXS/IQ2_XS/IQ3_XXS rule).
float stored_sign(uint32_t seven, int j) {
  int negatives = 0;
  for (int i = 0; i < 7; ++i) negatives += (seven >> i) & 1;
  const bool minus = j < 7 ? ((seven >> j) & 1) != 0 : (negatives % 2) != 0;
  return minus ? -1.f : 1.f;
}

// The sub-block multiplier of IQ2_XXS / IQ2_XS / IQ2_S from a 4-bit scale.
float iq2_db(float d, int s) { return d * (0.5f + static_cast<float>(s)) * 0.25f; }

TEST(GgufDequantIq, IQ2XXS) {
  FieldSource src(21);
  std::string bytes;
  std::vector<float> expected;
  int group = 0;
  for (int b = 0; b < kBlocks; ++b) {
    std::string block(66, '\0');
    const uint16_t d = src.half(b);
    put(block, 0, d);
    for (int ib = 0; ib < 8; ++ib) {
      const int s = src.uniform(16);
      uint32_t aux = static_cast<uint32_t>(s) << 28;
      for (int l = 0; l < 4; ++l, ++group) {
        const uint8_t index = static_cast<uint8_t>(src.uniform(256));
        const uint32_t seven = group % 128;
        block[2 + 8 * ib + l] = static_cast<char>(index);
        aux |= seven << (7 * l);
        for (int j = 0; j < 8; ++j) {
          expected.push_back(iq2_db(half_value(d), s) *
                             static_cast<float>(byte_of(tables::kIq2xxsGrid[index], j)) *
                             stored_sign(seven, j));
        }
      }
      put(block, 2 + 8 * ib + 4, aux);
    }
    bytes += block;
  }
  expect_decodes_to(GgmlType::kIQ2_XXS, bytes, expected);
}

TEST(GgufDequantIq, IQ2XS) {
  FieldSource src(22);
  std::string bytes;
  std::vector<float> expected;
  int group = 0;
  for (int b = 0; b < kBlocks; ++b) {
    std::string block(74, '\0');
    const uint16_t d = src.half(b);
    put(block, 0, d);
    for (int ib = 0; ib < 8; ++ib) {
      const int s[2] = {static_cast<int>(src.uniform(16)), static_cast<int>(src.uniform(16))};
      block[66 + ib] = static_cast<char>(s[0] | (s[1] << 4));  // groups 0-1, then 2-3
      for (int l = 0; l < 4; ++l, ++group) {
        const uint16_t index = static_cast<uint16_t>(src.uniform(512));
        const uint32_t seven = group % 128;
        put(block, 2 + 2 * (4 * ib + l), static_cast<uint16_t>(index | (seven << 9)));
        for (int j = 0; j < 8; ++j) {
          expected.push_back(iq2_db(half_value(d), s[l / 2]) *
                             static_cast<float>(byte_of(tables::kIq2xsGrid[index], j)) *
                             stored_sign(seven, j));
        }
      }
    }
    bytes += block;
  }
  expect_decodes_to(GgmlType::kIQ2_XS, bytes, expected);
}

TEST(GgufDequantIq, IQ2S) {
  FieldSource src(23);
  std::string bytes;
  std::vector<float> expected;
  int group = 0;
  for (int b = 0; b < kBlocks; ++b) {
    std::string block(82, '\0');
    const uint16_t d = src.half(b);
    put(block, 0, d);
    for (int ib = 0; ib < 8; ++ib) {
      const int s[2] = {static_cast<int>(src.uniform(16)), static_cast<int>(src.uniform(16))};
      block[74 + ib] = static_cast<char>(s[0] | (s[1] << 4));
      for (int l = 0; l < 4; ++l, ++group) {
        // 10-bit index: low 8 bits in qs, high 2 bits in bits 2l..2l+1 of qh[ib]; 8 explicit
        // signs (every byte value appears across the blocks).
        const int index = static_cast<int>(src.uniform(1024));
        const uint8_t signs = static_cast<uint8_t>(group % 256);
        block[2 + 4 * ib + l] = static_cast<char>(index & 0xFF);
        put_bits(block, 66 + ib, 2 * l, static_cast<uint32_t>(index >> 8));
        block[34 + 4 * ib + l] = static_cast<char>(signs);
        for (int j = 0; j < 8; ++j) {
          expected.push_back(iq2_db(half_value(d), s[l / 2]) *
                             static_cast<float>(byte_of(tables::kIq2sGrid[index], j)) *
                             ((signs >> j) & 1 ? -1.f : 1.f));
        }
      }
    }
    bytes += block;
  }
  expect_decodes_to(GgmlType::kIQ2_S, bytes, expected);
}

// Eight IQ3 weights from two grid entries of four magnitudes.
void push_iq3(float db, uint32_t g1, uint32_t g2, const float* sign, std::vector<float>* out) {
  for (int j = 0; j < 8; ++j) {
    const uint8_t m = j < 4 ? byte_of(g1, j) : byte_of(g2, j - 4);
    out->push_back(db * static_cast<float>(m) * sign[j]);
  }
}

TEST(GgufDequantIq, IQ3XXS) {
  FieldSource src(24);
  std::string bytes;
  std::vector<float> expected;
  int group = 0;
  for (int b = 0; b < kBlocks; ++b) {
    std::string block(98, '\0');
    const uint16_t d = src.half(b);
    put(block, 0, d);
    for (int ib = 0; ib < 8; ++ib) {
      const int s = src.uniform(16);
      const float db = half_value(d) * (0.5f + static_cast<float>(s)) * 0.5f;
      uint32_t aux = static_cast<uint32_t>(s) << 28;
      for (int l = 0; l < 4; ++l, ++group) {
        const uint8_t i1 = static_cast<uint8_t>(src.uniform(256));
        const uint8_t i2 = static_cast<uint8_t>(src.uniform(256));
        block[2 + 8 * ib + 2 * l] = static_cast<char>(i1);
        block[2 + 8 * ib + 2 * l + 1] = static_cast<char>(i2);
        const uint32_t seven = group % 128;
        aux |= seven << (7 * l);
        float sign[8];
        for (int j = 0; j < 8; ++j) sign[j] = stored_sign(seven, j);
        push_iq3(db, tables::kIq3xxsGrid[i1], tables::kIq3xxsGrid[i2], sign, &expected);
      }
      put(block, 66 + 4 * ib, aux);
    }
    bytes += block;
  }
  expect_decodes_to(GgmlType::kIQ3_XXS, bytes, expected);
}

TEST(GgufDequantIq, IQ3S) {
  FieldSource src(25);
  std::string bytes;
  std::vector<float> expected;
  int group = 0;
  for (int b = 0; b < kBlocks; ++b) {
    std::string block(110, '\0');
    const uint16_t d = src.half(b);
    put(block, 0, d);
    for (int ib = 0; ib < 8; ++ib) {
      const int s = src.uniform(16);  // nibble ib % 2 of scales[ib / 2]
      put_bits(block, 106 + ib / 2, 4 * (ib % 2), s);
      const float db = half_value(d) * static_cast<float>(1 + 2 * s);
      for (int l = 0; l < 4; ++l, ++group) {
        // 9-bit indices: low 8 bits in qs, bit 8 in bits 2l / 2l+1 of qh[ib].
        const int i1 = src.uniform(512), i2 = src.uniform(512);
        block[2 + 8 * ib + 2 * l] = static_cast<char>(i1 & 0xFF);
        block[2 + 8 * ib + 2 * l + 1] = static_cast<char>(i2 & 0xFF);
        put_bits(block, 66 + ib, 2 * l, static_cast<uint32_t>(i1 >> 8));
        put_bits(block, 66 + ib, 2 * l + 1, static_cast<uint32_t>(i2 >> 8));
        const uint8_t signs = static_cast<uint8_t>(255 - group % 256);
        block[74 + 4 * ib + l] = static_cast<char>(signs);
        float sign[8];
        for (int j = 0; j < 8; ++j) sign[j] = (signs >> j) & 1 ? -1.f : 1.f;
        push_iq3(db, tables::kIq3sGrid[i1], tables::kIq3sGrid[i2], sign, &expected);
      }
    }
    bytes += block;
  }
  expect_decodes_to(GgmlType::kIQ3_S, bytes, expected);
}

// Eight IQ1 weights: dl * (grid value in {-1, 0, 1} + delta).
void push_iq1(float dl, uint64_t grid, float delta, std::vector<float>* out) {
  for (int j = 0; j < 8; ++j) {
    out->push_back(dl * (static_cast<float>(static_cast<int8_t>(byte_of(grid, j))) + delta));
  }
}

TEST(GgufDequantIq, IQ1S) {
  FieldSource src(26);
  std::string bytes;
  std::vector<float> expected;
  for (int b = 0; b < kBlocks; ++b) {
    std::string block(50, '\0');
    const uint16_t d = src.half(b);
    put(block, 0, d);
    for (int ib = 0; ib < 8; ++ib) {
      // qh[ib]: bits 3l..3l+2 the high index bits of group l, 12..14 the scale, 15 the delta sign.
      const int s = src.uniform(8);
      const bool negative = (b + ib) % 2 == 1;
      uint16_t qh = static_cast<uint16_t>((s << 12) | (negative ? 0x8000 : 0));
      const float dl = half_value(d) * static_cast<float>(2 * s + 1);
      for (int l = 0; l < 4; ++l) {
        const int index = src.uniform(2048);
        block[2 + 4 * ib + l] = static_cast<char>(index & 0xFF);
        qh = static_cast<uint16_t>(qh | ((index >> 8) << (3 * l)));
        push_iq1(dl, tables::kIq1sGrid[index], negative ? -0.125f : 0.125f, &expected);
      }
      put(block, 34 + 2 * ib, qh);
    }
    bytes += block;
  }
  expect_decodes_to(GgmlType::kIQ1_S, bytes, expected);
}

TEST(GgufDequantIq, IQ1M) {
  FieldSource src(27);
  std::string bytes;
  std::vector<float> expected;
  for (int b = 0; b < kBlocks; ++b) {
    std::string block(56, '\0');
    // The fp16 super-scale is spread over the top nibbles of the four u16 scale words.
    const uint16_t d = src.half(b);
    uint16_t words[4] = {0, 0, 0, 0};
    for (int w = 0; w < 4; ++w) words[w] = static_cast<uint16_t>(((d >> (4 * w)) & 0xF) << 12);
    for (int ib = 0; ib < 8; ++ib) {
      // Word ib / 2 holds sub-block ib's two 3-bit scales at bits 6 * (ib % 2) and + 3.
      const int s1 = src.uniform(8), s2 = src.uniform(8);
      words[ib / 2] = static_cast<uint16_t>(words[ib / 2] | (s1 << (6 * (ib % 2))) |
                                            (s2 << (6 * (ib % 2) + 3)));
      const float dl1 = half_value(d) * static_cast<float>(2 * s1 + 1);
      const float dl2 = half_value(d) * static_cast<float>(2 * s2 + 1);
      for (int l = 0; l < 4; ++l) {
        // qh[2 ib + l / 2]: nibble l % 2 holds the 3 high index bits and the delta sign (bit 3).
        const int index = src.uniform(2048);
        const bool negative = src.uniform(2) == 1;
        block[4 * ib + l] = static_cast<char>(index & 0xFF);
        put_bits(block, 32 + 2 * ib + l / 2, 4 * (l % 2), (index >> 8) | (negative ? 8 : 0));
        push_iq1(l < 2 ? dl1 : dl2, tables::kIq1sGrid[index], negative ? -0.125f : 0.125f,
                 &expected);
      }
    }
    for (int w = 0; w < 4; ++w) put(block, 48 + 2 * w, words[w]);
    bytes += block;
  }
  expect_decodes_to(GgmlType::kIQ1_M, bytes, expected);
}

// IQ4_NL's 16 levels as published (ggml kvalues_iq4nl).
constexpr int kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                1,    13,   25,  38,  53,  69,  89,  113};

TEST(GgufDequantIq, IQ4NL) {
  FieldSource src(28);
  std::string bytes;
  std::vector<float> expected;
  for (int b = 0; b < 40; ++b) {
    std::string block(18, '\0');
    const uint16_t d = src.half(b);
    put(block, 0, d);
    for (int e = 0; e < 32; ++e) {  // element e: nibble e / 16 of qs[e % 16]
      const int code = (b + e) % 16;
      put_bits(block, 2 + e % 16, 4 * (e / 16), code);
      expected.push_back(half_value(d) * static_cast<float>(kIq4Levels[code]));
    }
    bytes += block;
  }
  expect_decodes_to(GgmlType::kIQ4_NL, bytes, expected);
}

TEST(GgufDequantIq, IQ4XS) {
  FieldSource src(29);
  std::string bytes;
  std::vector<float> expected;
  for (int b = 0; b < kBlocks; ++b) {
    std::string block(136, '\0');
    const uint16_t d = src.half(b);
    put(block, 0, d);
    uint16_t scales_h = 0;
    for (int ib = 0; ib < 8; ++ib) {
      // 6-bit scale, stored + 32: low nibble in scales_l[ib / 2], top 2 bits at bit 2 ib of
      // scales_h.
      const int ls = ib == 0 && b == 0 ? 0 : static_cast<int>(src.uniform(64));
      put_bits(block, 4 + ib / 2, 4 * (ib % 2), ls & 0xF);
      scales_h = static_cast<uint16_t>(scales_h | ((ls >> 4) << (2 * ib)));
      const float dl = half_value(d) * static_cast<float>(ls - 32);
      for (int e = 0; e < 32; ++e) {
        const int code = src.uniform(16);
        put_bits(block, 8 + 16 * ib + e % 16, 4 * (e / 16), code);
        expected.push_back(dl * static_cast<float>(kIq4Levels[code]));
      }
    }
    put(block, 2, scales_h);
    bytes += block;
  }
  expect_decodes_to(GgmlType::kIQ4_XS, bytes, expected);
}

// An E2M1 code's value (OCP Microscaling Formats v1.0): sign, 2 exponent bits (bias 1), 1
// mantissa bit; exponent 0 is subnormal (0 or 0.5).
double e2m1(int code) {
  const int sign = code >> 3, e = (code >> 1) & 3, m = code & 1;
  const double v = e == 0 ? 0.5 * m : std::ldexp(1.0 + 0.5 * m, e - 1);
  return sign ? -v : v;
}

TEST(GgufDequantIq, MXFP4) {
  std::string bytes;
  std::vector<float> expected;
  for (int e8 = 0; e8 < 256; ++e8) {  // every E8M0 scale 2^(e8 - 127), the subnormal ones too
    std::string block(17, '\0');
    block[0] = static_cast<char>(e8);
    for (int e = 0; e < 32; ++e) {
      const int code = (e8 + e) % 16;
      put_bits(block, 1 + e % 16, 4 * (e / 16), code);
      // Exact in double; the float rounding is the only one (overflow to inf at the top).
      // ggml holds the doubled E2M1 values in an int8 table, which has no -0: code 8 (-0 in
      // the OCP spec) decodes to +0, and qbc follows ggml.
      const double v = code == 8 ? 0.0 : e2m1(code);
      expected.push_back(static_cast<float>(std::ldexp(v, e8 - 127)));
    }
    bytes += block;
  }
  expect_decodes_to(GgmlType::kMXFP4, bytes, expected);
}

// FNV-1a 64 over the little-endian bytes of a table's entries.
template <typename T, size_t N>
uint64_t fnv1a(const T (&table)[N]) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const T& v : table) {
    for (size_t k = 0; k < sizeof(T); ++k) {
      h ^= static_cast<uint8_t>(static_cast<uint64_t>(v) >> (8 * k));
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

// The transcribed grids equal ggml-common.h's: digests computed from that file's text (llama.cpp
// d32676d) with a script, and the value sets each grid is documented to use.
TEST(GgufDequantIq, GridTables) {
  EXPECT_EQ(fnv1a(tables::kIq2xxsGrid), 0xbb4ee025b5ac6e8eull);
  EXPECT_EQ(fnv1a(tables::kIq2xsGrid), 0xc9b1ee61e79909bdull);
  EXPECT_EQ(fnv1a(tables::kIq2sGrid), 0x123edd38a3b62b90ull);
  EXPECT_EQ(fnv1a(tables::kIq3xxsGrid), 0xdfa5dc83d6a155d5ull);
  EXPECT_EQ(fnv1a(tables::kIq3sGrid), 0xfa37020c25b44829ull);
  EXPECT_EQ(fnv1a(tables::kIq1sGrid), 0x6703ed863501ae2eull);
  // IQ2 magnitudes are 8, 25 and 43; IQ3_XXS's 4, 12, .., 52 and 62; IQ3_S's 1, 3, .., 15.
  auto iq2_values = [](const uint64_t* grid, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      for (int k = 0; k < 8; ++k) {
        const uint8_t v = byte_of(grid[i], k);
        ASSERT_TRUE(v == 0x08 || v == 0x19 || v == 0x2b) << i << " " << std::hex << grid[i];
      }
    }
  };
  iq2_values(tables::kIq2xxsGrid, 256);
  iq2_values(tables::kIq2xsGrid, 512);
  iq2_values(tables::kIq2sGrid, 1024);
  for (uint32_t g : tables::kIq3xxsGrid) {
    for (int k = 0; k < 4; ++k) {
      const int v = byte_of(g, k);
      ASSERT_TRUE(v == 62 || (v % 8 == 4 && v <= 52)) << std::hex << g;
    }
  }
  for (uint64_t g : tables::kIq1sGrid) {
    for (int k = 0; k < 8; ++k) {
      const int8_t v = static_cast<int8_t>(byte_of(g, k));
      ASSERT_TRUE(v >= -1 && v <= 1) << std::hex << g;
    }
  }
  for (uint32_t g : tables::kIq3sGrid) {
    for (int k = 0; k < 4; ++k)
      ASSERT_TRUE(byte_of(g, k) % 2 == 1 && byte_of(g, k) <= 15) << std::hex << g;
  }
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(tables::kIq4nlValues[i], kIq4Levels[i]);
    EXPECT_EQ(tables::kMxfp4Values[i], 2 * e2m1(i));
  }
}

}  // namespace
}  // namespace qbc::frontend
