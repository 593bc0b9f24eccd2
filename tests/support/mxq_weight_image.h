// Reads one linear's integer weights back from a compiled MXQ's weight image, through the
// layout docs/npu.md gives for fill-weights (per channel tile: its K tiles' dense code blocks,
// int4 two per byte low nibble first, then the scale, zero-point and offset blocks per K tile,
// then the bias block), so tests can prove the MXQ holds given codes, scales, zero points and
// float offsets.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "qbc/mxq/model_file.h"
#include "qbc/numerics/fp16.h"

namespace qbc::testing {

inline int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }
inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// One linear's codes, scales and zero points as the MXQ's weight image holds them.
struct ImageLinear {
  std::vector<int32_t> codes;  // [n * k]
  std::vector<float> scales;   // [n * groups]
  std::vector<int32_t> zeros;  // [n * groups]
  std::vector<float> mins;     // [n * groups] float offsets, when read with `min`
};

// Reads linear `node` ([n, k], `bits`, `group` inputs per scale or 0, with zero points and
// float offsets when `zero` / `min`) back from the image.
inline ImageLinear read_linear(const isa::Bundle& b, const std::string& node, int64_t n, int64_t k,
                               int bits, int64_t group, bool zero, bool min = false) {
  ImageLinear out;
  const auto buf = std::find_if(b.buffers.begin(), b.buffers.end(),
                                [&](const isa::Buffer& x) { return x.name == node + ".w"; });
  EXPECT_NE(buf, b.buffers.end()) << node;
  if (buf == b.buffers.end()) return out;
  // The tile sizes: the widest matmul of this node in any program.
  int64_t nt = 0, kt = 0;
  // fp16 scales and zero points of the weights' width: int4 two per byte, int8 one a byte
  // (docs/numerics.md)
  bool compact = false;
  for (const isa::Mode& m : b.modes) {
    for (const isa::Program* p : {&m.prefill, &m.decode}) {
      for (const isa::CoreProgram& c : p->cores) {
        for (const isa::Instr& in : c.code) {
          if (const auto* rq = std::get_if<isa::Requant>(&in.op);
              rq != nullptr && in.node >= 0 && b.nodes[static_cast<size_t>(in.node)] == node) {
            compact = b.buffers[static_cast<size_t>(rq->wscale.buffer)].dtype == isa::DType::kF16;
          }
          const auto* mm = std::get_if<isa::MatMul>(&in.op);
          if (mm == nullptr || in.node < 0 || b.nodes[static_cast<size_t>(in.node)] != node) {
            continue;
          }
          nt = std::max(nt, mm->n);
          kt = std::max(kt, mm->kt);
        }
      }
    }
  }
  EXPECT_GT(nt, 0) << node;
  if (nt == 0) return out;
  const int64_t A = b.dma_align;
  const int64_t ntiles = cdiv(n, nt), ktiles = cdiv(k, kt);
  const int64_t groups = group > 0 ? cdiv(k, group) : 1;
  const int64_t gt = group > 0 ? kt / group : 1;
  const int64_t w_bytes =
      align_up(nt * isa::dtype_bytes(bits == 4 ? isa::DType::kI4 : isa::DType::kI8, kt), A);
  const int64_t sblk = align_up(nt * gt * (compact ? 2 : 4), A);
  const int64_t zblk = align_up(!compact    ? nt * gt * 4
                                : bits == 4 ? (nt * gt + 1) / 2
                                            : nt * gt,
                                A);
  const int64_t sblocks = group > 0 ? ktiles : 1;
  const uint8_t* img = b.image_data() + (buf->offset - b.image_base);
  out.codes.assign(static_cast<size_t>(n * k), 0);
  out.scales.assign(static_cast<size_t>(n * groups), 0.f);
  out.zeros.assign(static_cast<size_t>(n * groups), 0);
  if (min) out.mins.assign(static_cast<size_t>(n * groups), 0.f);
  const int64_t mat = zero ? sblk + zblk : sblk;  // the offset block, after the zero points
  int64_t at = 0;
  for (int64_t t = 0; t < ntiles; ++t) {
    for (int64_t kk = 0; kk < ktiles; ++kk, at += w_bytes) {
      const int64_t k0 = kk * kt, kn = std::min(kt, k - k0);
      const int64_t row = bits == 4 ? (kn + 1) / 2 : kn;
      for (int64_t j = 0; j < nt && t * nt + j < n; ++j) {
        for (int64_t i = 0; i < kn; ++i) {
          int32_t q;
          if (bits == 8) {
            q = static_cast<int8_t>(img[at + j * row + i]);
          } else {
            const uint8_t byte = img[at + j * row + i / 2];
            const int32_t nib = i % 2 == 0 ? byte & 0xF : byte >> 4;
            q = nib >= 8 ? nib - 16 : nib;
          }
          out.codes[static_cast<size_t>((t * nt + j) * k + k0 + i)] = q;
        }
      }
    }
    for (int64_t s = 0; s < sblocks; ++s) {
      const int64_t gtk = group > 0 ? cdiv(std::min(kt, k - s * kt), group) : 1;
      for (int64_t j = 0; j < nt && t * nt + j < n; ++j) {
        for (int64_t g = 0; g < gtk; ++g) {
          const size_t dst = static_cast<size_t>((t * nt + j) * groups + s * gt + g);
          const int64_t e = j * gtk + g;
          if (compact) {
            uint16_t h;
            std::memcpy(&h, img + at + 2 * e, 2);
            out.scales[dst] = numerics::fp16_from_bits(h);
            if (min) {
              std::memcpy(&h, img + at + mat + 2 * e, 2);
              out.mins[dst] = numerics::fp16_from_bits(h);
            }
            if (zero && bits == 8) {
              out.zeros[dst] = static_cast<int8_t>(img[at + sblk + e]);
            } else if (zero) {
              const uint8_t byte = img[at + sblk + e / 2];
              const int32_t nib = e % 2 == 0 ? byte & 0xF : byte >> 4;
              out.zeros[dst] = nib >= 8 ? nib - 16 : nib;
            }
          } else {
            std::memcpy(&out.scales[dst], img + at + 4 * e, 4);
            if (zero) std::memcpy(&out.zeros[dst], img + at + sblk + 4 * e, 4);
            if (min) std::memcpy(&out.mins[dst], img + at + mat + 4 * e, 4);
          }
        }
      }
      at += mat + (min ? sblk : 0);
    }
    at += align_up(nt * 4, A);  // the bias block
  }
  return out;
}

}  // namespace qbc::testing
