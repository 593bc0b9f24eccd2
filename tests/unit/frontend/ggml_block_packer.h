// Helpers for the tests that build ggml quantized blocks by hand from the published layouts
// (ggml-common.h) and compute the expected values from the chosen fields: an fp16 decoder of
// the test's own, bit setters, a seeded source of fields, and the bit-exact comparison.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qbc/frontend/gguf.h"

namespace qbc::testing {

/// The value of IEEE binary16 `bits` (written from the format: 1 sign, 5 exponent bits with
/// bias 15, 10 fraction bits; exponent 0 is subnormal). Exact in float for every finite half.
inline float half_value(uint16_t bits) {
  const int sign = bits >> 15;
  const int exponent = (bits >> 10) & 0x1F;
  const int fraction = bits & 0x3FF;
  const double magnitude = exponent == 0 ? std::ldexp(static_cast<double>(fraction), -24)
                                         : std::ldexp(1024.0 + fraction, exponent - 25);
  return static_cast<float>(sign ? -magnitude : magnitude);
}

/// Fields for the blocks: fp16 scales that include the edge cases, then random ones.
class FieldSource {
 public:
  explicit FieldSource(uint32_t seed) : rng_(seed) {}

  /// A finite fp16 bit pattern: the i-th call first walks through zero, negative zero, the
  /// smallest and largest subnormals and negative values, then draws normal values of
  /// moderate size (exponent 5..20) with either sign.
  uint16_t half(int i) {
    static constexpr uint16_t kEdges[] = {0x0000, 0x8000, 0x0001, 0x03FF, 0x8001, 0x83FF, 0xBC00};
    if (i >= 0 && i < static_cast<int>(sizeof(kEdges) / sizeof(kEdges[0]))) return kEdges[i];
    const uint16_t exponent = static_cast<uint16_t>(5 + uniform(16));
    const uint16_t sign = uniform(2) ? 0x8000 : 0;
    return static_cast<uint16_t>(sign | (exponent << 10) | uniform(1024));
  }
  /// Uniform in [0, n).
  uint32_t uniform(uint32_t n) { return static_cast<uint32_t>(rng_() % n); }

 private:
  std::mt19937 rng_;
};

/// Writes `value` little-endian at `at`.
template <typename T>
void put(std::string& block, size_t at, T value) {
  std::memcpy(block.data() + at, &value, sizeof(T));
}
/// ORs `value << shift` into byte `at` (the fields of a byte are set one by one).
inline void put_bits(std::string& block, size_t at, int shift, uint32_t value) {
  block[at] = static_cast<char>(static_cast<uint8_t>(block[at]) | (value << shift));
}

/// Decodes `bytes` as `count` elements of `type` and checks every value's bit pattern.
inline void expect_decodes_to(frontend::GgmlType type, const std::string& bytes,
                              const std::vector<float>& expected) {
  std::vector<float> out(expected.size(), -12345.0f);
  const frontend::ByteSpan span{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
  const Status s =
      frontend::gguf_decode_f32(type, span, static_cast<int64_t>(expected.size()), out.data());
  ASSERT_TRUE(s.ok()) << s.to_string();
  int mismatches = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &out[i], 4);
    std::memcpy(&b, &expected[i], 4);
    if (a != b && ++mismatches <= 5) {
      ADD_FAILURE() << frontend::ggml_type_name(type) << " element " << i << " (block " << i / 256
                    << ", " << i % 256 << "): decoded " << out[i] << ", expected " << expected[i];
    }
  }
  EXPECT_EQ(mismatches, 0) << frontend::ggml_type_name(type);
}

}  // namespace qbc::testing
