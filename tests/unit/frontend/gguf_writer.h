// A minimal GGUF v3 writer for tests, written from the GGUF spec (ggml docs/gguf.md): header,
// key/values, tensor infos (dims innermost first, ggml type id, offset), the data section
// aligned to 32 bytes. Tensors are F32 values or the raw bytes of any ggml type. Shared by the
// tests that build GGUF files by hand (never written with qbc's own reader code).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf_bytes.h"
#include "qbc/frontend/gguf.h"

namespace qbc::testing {

class GgufWriter {
 public:
  void u32(const std::string& key, uint32_t v) { kv(key, frontend::GgufType::kUint32, enc(v)); }
  void f32(const std::string& key, float v) { kv(key, frontend::GgufType::kFloat32, enc(v)); }
  void boolean(const std::string& key, bool v) {
    kv(key, frontend::GgufType::kBool, enc<uint8_t>(v ? 1 : 0));
  }
  void str(const std::string& key, const std::string& v) {
    kv(key, frontend::GgufType::kString, enc_str(v));
  }
  void strings(const std::string& key, const std::vector<std::string>& v) {
    std::string payload;
    for (const std::string& s : v) payload += enc_str(s);
    kv(key, frontend::GgufType::kArray, enc_array(frontend::GgufType::kString, v.size(), payload));
  }
  void floats(const std::string& key, const std::vector<float>& v) {
    std::string payload;
    for (float x : v) payload += enc(x);
    kv(key, frontend::GgufType::kArray, enc_array(frontend::GgufType::kFloat32, v.size(), payload));
  }
  void ints(const std::string& key, const std::vector<int32_t>& v) {
    std::string payload;
    for (int32_t x : v) payload += enc(x);
    kv(key, frontend::GgufType::kArray, enc_array(frontend::GgufType::kInt32, v.size(), payload));
  }
  /// tokenizer.ggml.tokens = "t0", "t1", ...
  void tokens(int64_t n) {
    std::vector<std::string> names;
    for (int64_t i = 0; i < n; ++i) names.push_back("t" + std::to_string(i));
    strings("tokenizer.ggml.tokens", names);
  }
  /// An F32 tensor. `shape` is PyTorch order; GGUF stores it reversed.
  void tensor(const std::string& name, const std::vector<int64_t>& shape,
              const std::vector<float>& values) {
    tensor(name, shape, frontend::GgmlType::kF32,
           std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  }
  /// A tensor of any ggml type from its encoded bytes (rows of blocks along the last dim).
  void tensor(const std::string& name, const std::vector<int64_t>& shape, frontend::GgmlType type,
              std::string bytes) {
    tensors_.push_back({name, shape, type, std::move(bytes)});
  }
  std::string build() const {
    std::string out =
        "GGUF" + enc<uint32_t>(3) + enc<uint64_t>(tensors_.size()) + enc<uint64_t>(n_kv_) + kvs_;
    std::string data;
    for (const Tensor& t : tensors_) {
      out += enc_str(t.name) + enc<uint32_t>(static_cast<uint32_t>(t.shape.size()));
      for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) out += enc<uint64_t>(*it);
      out += enc<uint32_t>(static_cast<uint32_t>(t.type)) + enc<uint64_t>(data.size());
      data += t.bytes;
      data.append((32 - data.size() % 32) % 32, '\0');
    }
    out.append((32 - out.size() % 32) % 32, '\0');
    return out + data;
  }

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    frontend::GgmlType type;
    std::string bytes;
  };
  void kv(const std::string& key, frontend::GgufType type, const std::string& payload) {
    kvs_ += enc_str(key) + enc<uint32_t>(static_cast<uint32_t>(type)) + payload;
    ++n_kv_;
  }
  std::string kvs_;
  uint64_t n_kv_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace qbc::testing
