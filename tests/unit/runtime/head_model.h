// A tiny hand-made "model" for the runtime's tests: the host embedding, rope at the call's
// positions, then a quantized lm_head with fp32 logits (quantize, matmul, requant); the
// decode program alone also writes a 4-byte scratch marker.
#pragma once

#include <memory>

#include "qbc/isa/program.h"
#include "qbc/numerics/linear.h"
#include "qbc/numerics/rope.h"
#include "test_bundle.h"

namespace qbc::runtime::testing {

constexpr int64_t kHidden = 16, kVocab = 12, kEmbedRows = 20, kChunk = 3, kMaxCache = 8;

struct Model {
  std::shared_ptr<isa::Bundle> bundle;
  numerics::QLinear head;
  numerics::Rope rope;
};

inline Model make_model(int instances = 1) {
  using isa::Expr;
  Model m;
  BundleBuilder bb(1, instances, 1 << 14, kChunk, kMaxCache);
  isa::Bundle& b = bb.bundle();
  b.hidden = kHidden;
  b.vocab = kVocab;
  b.embed_rows = kEmbedRows;
  b.embedding = testing::random_f16(static_cast<size_t>(kEmbedRows * kHidden), 71, 1.5f);
  for (float& e : b.embedding) e = e * 1.0003f;  // host fp32 values, rounded on the way in
  isa::RopeDesc rd;
  rd.heads = 2;
  rd.head_dim = 8;
  rd.rotary_dim = 8;
  rd.inv_freq = {1.0, 0.2, 0.04, 0.008};
  b.ropes.push_back(rd);
  m.rope.heads = 2;
  m.rope.head_dim = 8;
  m.rope.rotary_dim = 8;
  m.rope.inv_freq = rd.inv_freq;
  numerics::QLinear& h = m.head;
  h.out = kVocab;
  h.in = kHidden;
  h.wq = testing::random_codes(static_cast<size_t>(kVocab * kHidden), 72, -128, 127);
  for (int64_t j = 0; j < kVocab; ++j) h.wscale.push_back(0.004f + 0.0005f * static_cast<float>(j));
  h.in_dynamic = h.in_asym = true;
  h.out_fp16 = false;

  const Expr seq = Expr::sym(isa::Sym::kSeq), start = Expr::sym(isa::Sym::kStart);
  b.input = bb.dram("inputs_embeds", isa::Purpose::kIo, kChunk * kHidden * 2, true);
  b.output = bb.dram("logits", isa::Purpose::kIo, kChunk * kVocab * 4, true);
  const int32_t marker = bb.dram("decode_marker", isa::Purpose::kScratch, 4, true);
  const int32_t w_d =
      bb.weights("lm_head.w", testing::code_bytes(h.wq, kVocab, kHidden, isa::DType::kI8));
  const int32_t ws_d = bb.weights("lm_head.ws", testing::raw_bytes(h.wscale));
  const int32_t x = bb.sram("x", 0, kChunk * kHidden * 2),
                xr = bb.sram("xr", 0, kChunk * kHidden * 2);
  const int32_t codes = bb.sram("codes", 0, kChunk * kHidden), xs = bb.sram("xs", 0, kChunk * 4);
  const int32_t xz = bb.sram("xz", 0, kChunk * 4), w = bb.sram("w", 0, kVocab * kHidden);
  const int32_t ws = bb.sram("ws", 0, kVocab * 4), acc = bb.sram("acc", 0, kChunk * kVocab * 4);
  const int32_t y = bb.sram("y", 0, kChunk * kVocab * 4);
  bb.copy(0, bb.ref(w), bb.ref(w_d), kVocab * kHidden);
  bb.copy(0, bb.ref(ws), bb.ref(ws_d), kVocab * 4);
  bb.copy(0, bb.ref(x), bb.ref(b.input), kHidden * 2, seq);
  isa::Rope r;
  r.x = bb.ref(x);
  r.y = bb.ref(xr);
  r.rows = seq;
  r.pos0 = start;
  r.freq_pos = start + seq - 1;
  r.rope = 0;
  bb.emit(0, r);
  isa::Quantize q;
  q.x = bb.ref(xr);
  q.codes = bb.ref(codes);
  q.scale = bb.ref(xs);
  q.zero = bb.ref(xz);
  q.rows = seq;
  q.k = kHidden;
  bb.emit(0, q);
  isa::MatMul mm;
  mm.x = bb.ref(codes);
  mm.xzero = bb.ref(xz);
  mm.w = bb.ref(w);
  mm.acc = bb.ref(acc);
  mm.rows = seq;
  mm.n = kVocab;
  mm.kt = kHidden;
  mm.ldx = kHidden;
  bb.emit(0, mm);
  isa::Requant rq;
  rq.acc = bb.ref(acc);
  rq.xscale = bb.ref(xs);
  rq.wscale = bb.ref(ws);
  rq.y = bb.ref(y);
  rq.rows = seq;
  rq.n = kVocab;
  rq.ldy = kVocab;
  rq.ytype = isa::DType::kF32;
  bb.emit(0, rq);
  bb.copy(0, bb.ref(b.output), bb.ref(y), kVocab * 4, seq);
  // The decode program alone also writes 4 bytes of scratch: the test counts decode calls.
  isa::Instr mark;
  mark.queue = isa::Queue::kStore;
  isa::Dma md;
  md.dst = bb.ref(marker);
  md.src = bb.ref(y);
  md.row_bytes = 4;
  mark.op = md;
  bb.code(isa::Phase::kDecode, 0).push_back(mark);
  m.bundle = bb.finish();
  return m;
}

}  // namespace qbc::runtime::testing
