// Small hand-built bundles the isa tests share: a valid one-core projection program with
// hand-written tokens, and the helpers to write instructions compactly.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "qbc/isa/program.h"

namespace qbc::isa::testing {

/// The token bit of channel `c`.
inline uint8_t tok(Channel c) { return static_cast<uint8_t>(1u << static_cast<int>(c)); }

inline Instr ins(Op op, Queue q, uint8_t wait = 0, uint8_t signal = 0, int32_t node = -1,
                 int32_t pass = -1) {
  Instr in;
  in.op = std::move(op);
  in.queue = q;
  in.wait = wait;
  in.signal = signal;
  in.node = node;
  in.pass = pass;
  return in;
}

inline Expr seq() { return Expr::sym(Sym::kSeq); }

inline int32_t add_buffer(Bundle& b, const std::string& name, Space space, int32_t core,
                          Purpose purpose, DType dtype, int64_t offset, int64_t bytes,
                          std::vector<int64_t> shape) {
  Buffer buf;
  buf.name = name;
  buf.space = space;
  buf.core = core;
  buf.purpose = purpose;
  buf.dtype = dtype;
  buf.offset = offset;
  buf.bytes = bytes;
  buf.shape = std::move(shape);
  b.buffers.push_back(std::move(buf));
  return static_cast<int32_t>(b.buffers.size()) - 1;
}

/// A strided 2-D DMA of `rows` rows of `row_bytes`, both sides `stride` apart.
inline Dma dma(int32_t dst, Expr dst_off, int32_t src, Expr src_off, Expr rows, int64_t row_bytes,
               int64_t stride) {
  Dma d;
  d.dst = Ref{dst, std::move(dst_off)};
  d.src = Ref{src, std::move(src_off)};
  d.rows = std::move(rows);
  d.row_bytes = row_bytes;
  d.dst_stride = stride;
  d.src_stride = stride;
  return d;
}

/// Buffer ids of small_bundle().
enum SmallBuffer : int32_t { kW, kWs, kIn, kOut, kX, kXq, kXs, kXz, kWt, kWst, kAcc, kY };

/// The target and model header of the small bundles: 2 cores of 32 KiB SRAM, 64 KiB DRAM,
/// 16-byte DMA alignment, hidden = vocab = 64, chunk 16, a cache of 64 positions.
inline Bundle small_header() {
  Bundle b;
  b.target = "test";
  b.target_cores = 2;
  b.sram_bytes = 32768;
  b.dram_bytes = 65536;
  b.dma_align = 16;
  b.hidden = 64;
  b.vocab = 64;
  b.max_cache = 64;
  b.chunk = 16;
  b.batch = 1;
  return b;
}

/// The stream of small_bundle(): a 64x64 int8 projection of `seq` rows, with its tokens.
inline std::vector<Instr> small_code() {
  const Queue ld = Queue::kLoad, cmp = Queue::kCompute, st = Queue::kStore;
  const uint8_t l2c = tok(Channel::kLoadToCompute), c2s = tok(Channel::kComputeToStore);
  Quantize q;
  q.x = Ref{kX, 0};
  q.codes = Ref{kXq, 0};
  q.scale = Ref{kXs, 0};
  q.zero = Ref{kXz, 0};
  q.rows = seq();
  q.k = 64;
  MatMul m;
  m.x = Ref{kXq, 0};
  m.xzero = Ref{kXz, 0};
  m.w = Ref{kWt, 0};
  m.acc = Ref{kAcc, 0};
  m.rows = seq();
  m.n = 64;
  m.kt = 64;
  m.ldx = 64;
  Requant r;
  r.acc = Ref{kAcc, 0};
  r.xscale = Ref{kXs, 0};
  r.wscale = Ref{kWst, 0};
  r.y = Ref{kY, 0};
  r.rows = seq();
  r.n = 64;
  r.ldy = 64;
  r.ytype = DType::kF32;
  return {
      ins(dma(kX, 0, kIn, 0, seq(), 128, 128), ld, 0, l2c, 0, 0),
      ins(dma(kWt, 0, kW, 0, 64, 64, 64), ld, 0, l2c, 1, 0),
      ins(dma(kWst, 0, kWs, 0, 1, 256, 256), ld, 0, l2c, 1, 0),
      ins(q, cmp, l2c, 0, 1, 0),
      ins(m, cmp, l2c, 0, 1, 0),
      ins(r, cmp, l2c, c2s, 1, 0),
      ins(dma(kOut, 0, kY, 0, seq(), 256, 256), st, c2s, 0, 2, 0),
  };
}

/// Adds a global4 mode of two cooperating cores running `c0` and `c1` in both phases
/// (prefill max_seq 16).
inline void add_two_core_mode(Bundle& b, std::vector<Instr> c0, std::vector<Instr> c1) {
  Mode m;
  m.scheme = Scheme::kGlobal4;
  m.cores_per_instance = 2;
  m.prefill.phase = Phase::kPrefill;
  m.prefill.max_seq = 16;
  m.prefill.cores = {CoreProgram{0, std::move(c0)}, CoreProgram{1, std::move(c1)}};
  m.decode.phase = Phase::kDecode;
  m.decode.cores = m.prefill.cores;
  b.modes.push_back(std::move(m));
}

/// A valid one-core bundle: mode 0 "single" (1 instance) whose prefill (max_seq 16) and decode
/// (max_seq 1) both run small_code().
inline Bundle small_bundle() {
  Bundle b = small_header();
  const Space D = Space::kDram, S = Space::kSram;
  const Purpose sram = Purpose::kSram;
  add_buffer(b, "W", D, -1, Purpose::kWeights, DType::kI8, 0, 4096, {64, 64});
  add_buffer(b, "WS", D, -1, Purpose::kWeights, DType::kF32, 4096, 256, {64});
  add_buffer(b, "in", D, -1, Purpose::kIo, DType::kF16, 8192, 2048, {16, 64});
  add_buffer(b, "out", D, -1, Purpose::kIo, DType::kF32, 12288, 4096, {16, 64});
  add_buffer(b, "x", S, 0, sram, DType::kF16, 0, 2048, {16, 64});
  add_buffer(b, "xq", S, 0, sram, DType::kI8, 2048, 1024, {16, 64});
  add_buffer(b, "xs", S, 0, sram, DType::kF32, 3072, 64, {16});
  add_buffer(b, "xz", S, 0, sram, DType::kI32, 3136, 64, {16});
  add_buffer(b, "w", S, 0, sram, DType::kI8, 4096, 4096, {64, 64});
  add_buffer(b, "ws", S, 0, sram, DType::kF32, 8192, 256, {64});
  add_buffer(b, "acc", S, 0, sram, DType::kI32, 8448, 4096, {16, 64});
  add_buffer(b, "y", S, 0, sram, DType::kF32, 12544, 4096, {16, 64});
  b.input = kIn;
  b.output = kOut;
  b.image.assign(4352, 0);
  b.nodes = {"embed_in", "blk.0.q_proj", "logits_out"};
  b.passes = {"test"};
  b.dram.weights = 4352;
  b.dram.io = 6144;
  Mode m;
  m.prefill.phase = Phase::kPrefill;
  m.prefill.max_seq = 16;
  m.prefill.cores = {CoreProgram{0, small_code()}};
  m.decode.phase = Phase::kDecode;
  m.decode.max_seq = 1;
  m.decode.cores = {CoreProgram{0, small_code()}};
  b.modes.push_back(std::move(m));
  return b;
}

}  // namespace qbc::isa::testing
