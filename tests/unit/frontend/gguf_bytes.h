// Little-endian GGUF encoding helpers shared by the tests that build GGUF files by hand.
#pragma once

#include <cstdint>
#include <string>

#include "qbc/frontend/gguf.h"

namespace qbc::testing {

/// The raw bytes of `value`.
template <typename T>
std::string enc(T value) {
  return std::string(reinterpret_cast<const char*>(&value), sizeof(T));
}
/// A GGUF string: u64 length, then the bytes.
inline std::string enc_str(const std::string& s) { return enc<uint64_t>(s.size()) + s; }
/// A GGUF array value: u32 element type, u64 count, then `payload` (the encoded elements).
inline std::string enc_array(frontend::GgufType elem, uint64_t count, const std::string& payload) {
  return enc<uint32_t>(static_cast<uint32_t>(elem)) + enc<uint64_t>(count) + payload;
}

}  // namespace qbc::testing
