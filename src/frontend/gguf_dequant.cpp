// ggml type table and float32 decoding of GGUF tensor data. The 32-element types are decoded
// here; the K-quants and ternary types in gguf_dequant_k.cpp, the i-quants, IQ4_NL/IQ4_XS and
// MXFP4 in gguf_dequant_iq.cpp. Block layouts follow ggml (ggml-common.h / ggml-quants.c):
//   q4_0: fp16 d, 16 bytes qs          x = ((qs nibble) - 8) * d
//   q4_1: fp16 d, fp16 m, 16 bytes qs  x = (qs nibble) * d + m
//   q5_0: fp16 d, u32 qh, 16 bytes qs  x = ((nibble | high bit << 4) - 16) * d
//   q5_1: fp16 d, fp16 m, u32 qh, qs   x = (nibble | high bit << 4) * d + m
//   q8_0: fp16 d, 32 x int8            x = q * d
// In the 4/5-bit types byte j holds element j (low nibble) and j + 16 (high
// nibble); bit j of qh is the 5th bit of element j.
#include <cstring>

#include "gguf_blocks.h"
#include "qbc/frontend/gguf.h"
#include "qbc/tensorfile/dtype.h"

namespace qbc::frontend {
namespace {

constexpr GgmlTypeTraits kTypes[] = {
    {GgmlType::kF32, "f32", 1, 4, true},
    {GgmlType::kF16, "f16", 1, 2, true},
    {GgmlType::kQ4_0, "q4_0", 32, 18, true},
    {GgmlType::kQ4_1, "q4_1", 32, 20, true},
    {GgmlType::kQ5_0, "q5_0", 32, 22, true},
    {GgmlType::kQ5_1, "q5_1", 32, 24, true},
    {GgmlType::kQ8_0, "q8_0", 32, 34, true},
    {GgmlType::kQ8_1, "q8_1", 32, 36, false},
    {GgmlType::kQ2_K, "q2_K", 256, 84, true},
    {GgmlType::kQ3_K, "q3_K", 256, 110, true},
    {GgmlType::kQ4_K, "q4_K", 256, 144, true},
    {GgmlType::kQ5_K, "q5_K", 256, 176, true},
    {GgmlType::kQ6_K, "q6_K", 256, 210, true},
    {GgmlType::kQ8_K, "q8_K", 256, 292, true},
    {GgmlType::kIQ2_XXS, "iq2_xxs", 256, 66, true},
    {GgmlType::kIQ2_XS, "iq2_xs", 256, 74, true},
    {GgmlType::kIQ3_XXS, "iq3_xxs", 256, 98, true},
    {GgmlType::kIQ1_S, "iq1_s", 256, 50, true},
    {GgmlType::kIQ4_NL, "iq4_nl", 32, 18, true},
    {GgmlType::kIQ3_S, "iq3_s", 256, 110, true},
    {GgmlType::kIQ2_S, "iq2_s", 256, 82, true},
    {GgmlType::kIQ4_XS, "iq4_xs", 256, 136, true},
    {GgmlType::kI8, "i8", 1, 1, false},
    {GgmlType::kI16, "i16", 1, 2, false},
    {GgmlType::kI32, "i32", 1, 4, false},
    {GgmlType::kI64, "i64", 1, 8, false},
    {GgmlType::kF64, "f64", 1, 8, false},
    {GgmlType::kIQ1_M, "iq1_m", 256, 56, true},
    {GgmlType::kBF16, "bf16", 1, 2, true},
    {GgmlType::kTQ1_0, "tq1_0", 256, 54, true},
    {GgmlType::kTQ2_0, "tq2_0", 256, 66, true},
    {GgmlType::kMXFP4, "mxfp4", 32, 17, true},
};

using gguf_blocks::load_fp16;

// Decodes one block of 32 elements of a 4/5-bit type: `qs` has 16 bytes, `qh` the 5th bits
// (or 0), value = (q - offset) * d, plus m for the types with a minimum (q4_1, q5_1). The
// symmetric types add nothing, as ggml does, so a zero keeps its sign.
void decode_nibbles(const uint8_t* qs, uint32_t qh, int offset, float d, const float* m, float* y) {
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
    const int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = static_cast<float>(lo - offset) * d;
    y[j + 16] = static_cast<float>(hi - offset) * d;
    if (m != nullptr) {
      y[j] += *m;
      y[j + 16] += *m;
    }
  }
}

void decode_q4_0(const uint8_t* b, float* y) {
  decode_nibbles(b + 2, 0, 8, load_fp16(b), nullptr, y);
}

void decode_q4_1(const uint8_t* b, float* y) {
  const float m = load_fp16(b + 2);
  decode_nibbles(b + 4, 0, 0, load_fp16(b), &m, y);
}

void decode_q5_0(const uint8_t* b, float* y) {
  uint32_t qh = 0;
  std::memcpy(&qh, b + 2, 4);
  decode_nibbles(b + 6, qh, 16, load_fp16(b), nullptr, y);
}

void decode_q5_1(const uint8_t* b, float* y) {
  uint32_t qh = 0;
  std::memcpy(&qh, b + 4, 4);
  const float m = load_fp16(b + 2);
  decode_nibbles(b + 8, qh, 0, load_fp16(b), &m, y);
}

void decode_q8_0(const uint8_t* b, float* y) {
  const float d = load_fp16(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// The block decoder of a decodable quantized type.
gguf_blocks::BlockDecoder block_decoder(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0:
      return decode_q4_0;
    case GgmlType::kQ4_1:
      return decode_q4_1;
    case GgmlType::kQ5_0:
      return decode_q5_0;
    case GgmlType::kQ5_1:
      return decode_q5_1;
    case GgmlType::kQ8_0:
      return decode_q8_0;
    default:
      break;
  }
  if (auto k = gguf_blocks::k_quant_decoder(type)) return k;
  return gguf_blocks::iq_decoder(type);
}

}  // namespace

const GgmlTypeTraits* ggml_type_traits(uint32_t id) {
  for (const GgmlTypeTraits& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == id) return &t;
  }
  return nullptr;
}

std::string_view ggml_type_name(GgmlType type) {
  const GgmlTypeTraits* t = ggml_type_traits(static_cast<uint32_t>(type));
  return t ? t->name : "unknown";
}

Status gguf_decode_f32(GgmlType type, ByteSpan data, int64_t count, float* out) {
  const GgmlTypeTraits* traits = ggml_type_traits(static_cast<uint32_t>(type));
  if (traits == nullptr) return invalid_argument("unknown ggml type ", static_cast<uint32_t>(type));
  if (!traits->decodable) {
    return unimplemented("decoding ggml type ", traits->name, " to F32 is not implemented");
  }
  if (count < 0 || count % traits->block_size != 0) {
    return invalid_argument(count, " elements is not a multiple of the ", traits->name,
                            " block size ", traits->block_size);
  }
  const uint64_t blocks = static_cast<uint64_t>(count) / traits->block_size;
  if (data.size / traits->type_size != blocks || data.size % traits->type_size != 0) {
    return invalid_argument(count, " ", traits->name, " elements need ", blocks, " x ",
                            traits->type_size, " bytes, got ", data.size);
  }
  switch (type) {
    case GgmlType::kF32:
      return tensorfile::convert_to_f32(tensorfile::DType::kF32, data.data, blocks, out);
    case GgmlType::kF16:
      return tensorfile::convert_to_f32(tensorfile::DType::kF16, data.data, blocks, out);
    case GgmlType::kBF16:
      return tensorfile::convert_to_f32(tensorfile::DType::kBF16, data.data, blocks, out);
    default:
      break;
  }
  const gguf_blocks::BlockDecoder decode = block_decoder(type);
  if (decode == nullptr) {
    return internal_error("ggml type ", traits->name, " is marked decodable but has no decoder");
  }
  for (uint64_t i = 0; i < blocks; ++i) {
    decode(data.data + i * traits->type_size, out + i * traits->block_size);
  }
  return ok_status();
}

}  // namespace qbc::frontend
