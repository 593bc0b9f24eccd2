// Hand-made bundles for the executor's tests: a builder that places buffers one after
// another (DRAM weights first, with their image), appends instructions to the streams of a
// single mode, and helpers that move values in and out of a device's DRAM.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "qbc/isa/program.h"
#include "qbc/numerics/fp16.h"
#include "qbc/runtime/device.h"

namespace qbc::runtime::testing {

inline int64_t round_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

/// One mode (scheme single) of `instances` instances of `cores` cores; the decode program
/// takes one token, the prefill program `chunk` tokens. emit() appends to both programs.
class BundleBuilder {
 public:
  explicit BundleBuilder(int cores = 1, int instances = 1, int64_t sram_bytes = 1 << 16,
                         int64_t chunk = 8, int64_t max_cache = 64)
      : b_(std::make_shared<isa::Bundle>()), instances_(instances) {
    b_->target = "test";
    b_->target_cores = cores * instances;
    b_->sram_bytes = sram_bytes;
    b_->chunk = chunk;
    b_->max_cache = max_cache;
    b_->batch = instances;
    isa::Mode m;
    m.scheme = isa::Scheme::kSingle;
    m.cores_per_instance = cores;
    m.instances = instances;
    m.prefill.phase = isa::Phase::kPrefill;
    m.prefill.max_seq = chunk;
    m.decode.phase = isa::Phase::kDecode;
    m.decode.max_seq = 1;
    for (int c = 0; c < cores; ++c) {
      m.prefill.cores.push_back(isa::CoreProgram{c, {}});
      m.decode.cores.push_back(isa::CoreProgram{c, {}});
    }
    b_->modes.push_back(std::move(m));
    sram_next_.assign(static_cast<size_t>(cores), 0);
  }

  /// A DRAM buffer; `per_slot` gives every instance its own copy (slot_stride).
  int32_t dram(const std::string& name, isa::Purpose p, int64_t bytes, bool per_slot = false) {
    isa::Buffer buf;
    buf.name = name;
    buf.space = isa::Space::kDram;
    buf.purpose = p;
    buf.offset = dram_next_;
    buf.bytes = bytes;
    buf.slot_stride = per_slot ? round_up(bytes, 64) : 0;
    dram_next_ += per_slot ? buf.slot_stride * instances_ : round_up(bytes, 64);
    b_->buffers.push_back(buf);
    return static_cast<int32_t>(b_->buffers.size()) - 1;
  }
  /// A DRAM weights buffer holding `bytes` (part of the image).
  int32_t weights(const std::string& name, const std::vector<uint8_t>& bytes) {
    const int32_t id = dram(name, isa::Purpose::kWeights, static_cast<int64_t>(bytes.size()));
    const int64_t off = b_->buffers.back().offset;
    if (static_cast<int64_t>(image_.size()) < off + static_cast<int64_t>(bytes.size()))
      image_.resize(static_cast<size_t>(off) + bytes.size(), 0);
    std::copy(bytes.begin(), bytes.end(), image_.begin() + off);
    return id;
  }
  int32_t sram(const std::string& name, int32_t core, int64_t bytes,
               isa::DType dtype = isa::DType::kI8) {
    isa::Buffer buf;
    buf.name = name;
    buf.dtype = dtype;
    buf.space = isa::Space::kSram;
    buf.core = core;
    buf.purpose = isa::Purpose::kSram;
    buf.offset = sram_next_[static_cast<size_t>(core)];
    buf.bytes = bytes;
    sram_next_[static_cast<size_t>(core)] += round_up(bytes, 64);
    b_->buffers.push_back(buf);
    return static_cast<int32_t>(b_->buffers.size()) - 1;
  }
  static isa::Ref ref(int32_t buffer, isa::Expr offset = 0) { return isa::Ref{buffer, offset}; }

  std::vector<isa::Instr>& code(isa::Phase phase, int core) {
    isa::Mode& m = b_->modes[0];
    return (phase == isa::Phase::kPrefill ? m.prefill : m.decode)
        .cores[static_cast<size_t>(core)]
        .code;
  }
  /// Appends `op` to core `core` of both programs.
  void emit(int core, isa::Op op, int32_t node = -1) {
    for (isa::Phase ph : {isa::Phase::kPrefill, isa::Phase::kDecode}) {
      isa::Instr in;
      in.op = op;
      in.node = node;
      if (std::holds_alternative<isa::Dma>(op)) {
        const isa::Dma& d = std::get<isa::Dma>(op);
        in.queue = b_->buffers[static_cast<size_t>(d.src.buffer)].space == isa::Space::kDram
                       ? isa::Queue::kLoad
                       : isa::Queue::kStore;
      }
      code(ph, core).push_back(in);
    }
  }
  /// A DMA of `rows` rows of `row_bytes` between contiguous rows (DRAM -> SRAM when `src` is
  /// a DRAM buffer).
  void copy(int core, isa::Ref dst, isa::Ref src, int64_t row_bytes, isa::Expr rows = 1) {
    isa::Dma d;
    d.dst = dst;
    d.src = src;
    d.rows = rows;
    d.row_bytes = row_bytes;
    d.src_stride = row_bytes;
    d.dst_stride = row_bytes;
    emit(core, d);
  }
  int32_t node(const std::string& name) {
    b_->nodes.push_back(name);
    return static_cast<int32_t>(b_->nodes.size()) - 1;
  }
  isa::Bundle& bundle() { return *b_; }
  isa::Mode& mode() { return b_->modes[0]; }

  std::shared_ptr<isa::Bundle> finish() {
    b_->image_base = 0;
    b_->image = image_;
    b_->dram_bytes = 0;
    return b_;
  }

 private:
  std::shared_ptr<isa::Bundle> b_;
  int instances_;
  int64_t dram_next_ = 0;
  std::vector<int64_t> sram_next_;
  std::vector<uint8_t> image_;
};

inline std::shared_ptr<Device> make_device(std::shared_ptr<isa::Bundle> b, int threads = 1) {
  DeviceOptions o;
  o.host_threads = threads;
  StatusOr<std::shared_ptr<Device>> d = Device::create(std::move(b), o);
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  return d.ok() ? *d : nullptr;
}

template <typename T>
std::vector<uint8_t> raw_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}
template <typename T>
std::vector<T> values_of(const std::vector<uint8_t>& b) {
  std::vector<T> out(b.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), b.data(), out.size() * sizeof(T));
  return out;
}
inline std::vector<uint8_t> f16_bytes(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = numerics::fp16_bits(v[i]);
  return raw_bytes(h);
}
inline std::vector<float> f16_values(const std::vector<uint8_t>& b) {
  std::vector<uint16_t> h = values_of<uint16_t>(b);
  std::vector<float> out(h.size());
  for (size_t i = 0; i < h.size(); ++i) out[i] = numerics::fp16_from_bits(h[i]);
  return out;
}
/// Codes [rows, cols] stored as t (i4 packed per row, low nibble first; i8; i16).
inline std::vector<uint8_t> code_bytes(const std::vector<int32_t>& codes, int64_t rows,
                                       int64_t cols, isa::DType t) {
  const int64_t rb = isa::dtype_bytes(t, cols);
  std::vector<uint8_t> out(static_cast<size_t>(rows * rb), 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int32_t v = codes[static_cast<size_t>(r * cols + c)];
      uint8_t* p = out.data() + r * rb;
      if (t == isa::DType::kI4) {
        p[c / 2] |= static_cast<uint8_t>((v & 0xF) << (4 * (c % 2)));
      } else if (t == isa::DType::kI16) {
        const int16_t s = static_cast<int16_t>(v);
        std::memcpy(p + 2 * c, &s, 2);
      } else {
        p[c] = static_cast<uint8_t>(static_cast<int8_t>(v));
      }
    }
  }
  return out;
}

inline void write(Device& d, int32_t buffer, const std::vector<uint8_t>& bytes, int slot = 0) {
  uint8_t* p = d.dram(d.address(buffer, slot), static_cast<int64_t>(bytes.size()));
  ASSERT_NE(p, nullptr);
  std::memcpy(p, bytes.data(), bytes.size());
}
inline std::vector<uint8_t> read(Device& d, int32_t buffer, int64_t bytes, int slot = 0) {
  const uint8_t* p = d.dram(d.address(buffer, slot), bytes);
  EXPECT_NE(p, nullptr);
  if (p == nullptr) return {};
  return std::vector<uint8_t>(p, p + bytes);
}

/// Bitwise equality of two float vectors (tells -0 from +0).
inline ::testing::AssertionResult same_bits(const std::vector<float>& got,
                                            const std::vector<float>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure()
             << "element " << i << ": " << got[i] << " vs " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

/// fp16 values uniform in [-scale, scale], seeded.
inline std::vector<float> random_f16(size_t n, uint32_t seed, float scale) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = numerics::round_fp16(u(g));
  return v;
}
inline std::vector<int32_t> random_codes(size_t n, uint32_t seed, int lo, int hi) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> u(lo, hi);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = u(g);
  return v;
}

}  // namespace qbc::runtime::testing
