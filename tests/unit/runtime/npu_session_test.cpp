// NpuSession, the Runner over a device slot, on a tiny hand-made "model": the host
// embedding, rope at the call's positions, then a quantized lm_head with fp32 logits
// (quantize, matmul, requant). Forward splits tokens into chunk-sized prefill calls and a
// one-token decode call, matches the per-token reference in any split, refuses to pass the
// cache capacity, restarts at 0 after reset, and two slots of one device keep their own
// positions.
#include "qbc/runtime/npu_session.h"

#include <gtest/gtest.h>

#include <vector>

#include "qbc/numerics/fp16.h"
#include "qbc/numerics/linear.h"
#include "qbc/numerics/rope.h"
#include "test_bundle.h"
#include "test_support.h"

namespace qbc::runtime {
namespace {

using isa::Expr;
using qbc::testing::contains;
using testing::BundleBuilder;

constexpr int64_t kHidden = 16, kVocab = 12, kEmbedRows = 20, kChunk = 3, kMaxCache = 8;

struct Model {
  std::shared_ptr<isa::Bundle> bundle;
  numerics::QLinear head;
  numerics::Rope rope;
};

Model make_model(int instances = 1) {
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
  isa::Dma md;
  md.dst = bb.ref(marker);
  md.src = bb.ref(y);
  md.row_bytes = 4;
  mark.op = md;
  bb.code(isa::Phase::kDecode, 0).push_back(mark);
  m.bundle = bb.finish();
  return m;
}

/// Per-token reference: fp16(embedding) -> rope at its position -> the quantized head.
std::vector<float> reference(const Model& m, const std::vector<int32_t>& tokens, int64_t pos0) {
  std::vector<float> out;
  for (size_t t = 0; t < tokens.size(); ++t) {
    std::vector<float> e(kHidden), r(kHidden), l(kVocab);
    for (int64_t i = 0; i < kHidden; ++i)
      e[static_cast<size_t>(i)] =
          numerics::round_fp16(m.bundle->embedding[static_cast<size_t>(tokens[t] * kHidden + i)]);
    numerics::rope(e.data(), 1, pos0 + static_cast<int64_t>(t), m.rope, r.data());
    numerics::qlinear(r.data(), 1, m.head, l.data());
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

std::unique_ptr<NpuSession> session(std::shared_ptr<Device> d, int slot = 0) {
  StatusOr<std::unique_ptr<NpuSession>> s = NpuSession::create(std::move(d), slot);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(*s) : nullptr;
}

const std::vector<int32_t> kTokens = {3, 17, 0, 8, 8, 19, 5};

TEST(RuntimeNpuSession, ChunksAndDecodeEqualThePerTokenReference) {
  const Model m = make_model();
  std::shared_ptr<Device> d = testing::make_device(m.bundle);
  ASSERT_NE(d, nullptr);
  std::unique_ptr<NpuSession> s = session(d);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->vocab_size(), kVocab);
  EXPECT_EQ(s->hidden_size(), kHidden);
  std::vector<float> logits;
  QBC_ASSERT_OK(s->forward(kTokens, &logits));  // calls of 3, 3 and 1 (decode) tokens
  EXPECT_EQ(s->position(), 7);
  EXPECT_TRUE(testing::same_bits(logits, reference(m, kTokens, 0)));
  EXPECT_EQ(d->counters()[0].dram_written[static_cast<int>(isa::Purpose::kScratch)], 4);
  // Token by token (decode only) from a reset gives the same bits.
  s->reset();
  EXPECT_EQ(s->position(), 0);
  std::vector<float> all, one;
  for (int32_t t : kTokens) {
    QBC_ASSERT_OK(s->forward({t}, &one));
    all.insert(all.end(), one.begin(), one.end());
  }
  EXPECT_TRUE(testing::same_bits(all, logits));
  EXPECT_EQ(d->counters()[0].dram_written[static_cast<int>(isa::Purpose::kScratch)], 4 * 8);
}

TEST(RuntimeNpuSession, CapacityIsKResourceExhaustedNamingMaxCache) {
  const Model m = make_model();
  std::unique_ptr<NpuSession> s = session(testing::make_device(m.bundle));
  ASSERT_NE(s, nullptr);
  std::vector<float> logits;
  QBC_ASSERT_OK(s->forward(kTokens, &logits));
  const Status st = s->forward({1, 2}, &logits);
  EXPECT_EQ(st.code(), Code::kResourceExhausted);
  EXPECT_TRUE(contains(st.message(), "7 cached + 2 new tokens exceed max_cache 8")) << st.message();
  EXPECT_EQ(s->position(), 7);
  QBC_ASSERT_OK(s->forward({1}, &logits));  // exactly full
  EXPECT_TRUE(testing::same_bits(logits, reference(m, {1}, 7)));
  EXPECT_EQ(s->forward({1}, nullptr).code(), Code::kResourceExhausted);
  s->reset();
  QBC_ASSERT_OK(s->forward({kTokens[0], kTokens[1]}, &logits));
  EXPECT_TRUE(testing::same_bits(logits, reference(m, {kTokens[0], kTokens[1]}, 0)));
}

TEST(RuntimeNpuSession, BadInputsAndActivationsAreErrors) {
  const Model m = make_model();
  std::shared_ptr<Device> d = testing::make_device(m.bundle);
  ASSERT_NE(d, nullptr);
  std::unique_ptr<NpuSession> s = session(d);
  ASSERT_NE(s, nullptr);
  std::vector<float> logits;
  EXPECT_EQ(s->forward({kEmbedRows}, &logits).code(), Code::kInvalidArgument);
  EXPECT_EQ(s->forward({}, &logits).code(), Code::kInvalidArgument);
  EXPECT_EQ(s->forward_embeds(std::vector<float>(5), 1, &logits).code(), Code::kInvalidArgument);
  s->set_keep_activations(true);
  std::vector<float> v;
  const Status a = s->activation("blk.0.attn", &v, nullptr);
  EXPECT_EQ(a.code(), Code::kUnimplemented);
  EXPECT_TRUE(contains(a.message(), "fake-quant evaluator")) << a.message();
  EXPECT_EQ(NpuSession::create(d, 1).status().code(), Code::kInvalidArgument);
  // forward_embeds takes host values and rounds them like forward does.
  std::vector<float> e;
  QBC_ASSERT_OK(s->embed({4, 9}, &e));
  QBC_ASSERT_OK(s->forward_embeds(e, 2, &logits));
  EXPECT_TRUE(testing::same_bits(logits, reference(m, {4, 9}, 0)));
}

TEST(RuntimeNpuSession, SlotsOfOneDeviceKeepTheirOwnPositions) {
  const Model m = make_model(2);
  std::shared_ptr<Device> d = testing::make_device(m.bundle);
  ASSERT_NE(d, nullptr);
  std::unique_ptr<NpuSession> a = session(d, 0), b = session(d, 1);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  std::vector<float> la, lb, tmp;
  QBC_ASSERT_OK(a->forward({1, 2, 3, 4}, &la));
  QBC_ASSERT_OK(b->forward({5}, &lb));
  QBC_ASSERT_OK(a->forward({6}, &tmp));
  la.insert(la.end(), tmp.begin(), tmp.end());
  QBC_ASSERT_OK(b->forward({7, 8}, &tmp));
  lb.insert(lb.end(), tmp.begin(), tmp.end());
  EXPECT_EQ(a->position(), 5);
  EXPECT_EQ(b->position(), 3);
  EXPECT_TRUE(testing::same_bits(la, reference(m, {1, 2, 3, 4, 6}, 0)));
  EXPECT_TRUE(testing::same_bits(lb, reference(m, {5, 7, 8}, 0)));
  ASSERT_EQ(d->counters().size(), 2u);
  EXPECT_GT(d->counters()[1].macs, 0);
}

}  // namespace
}  // namespace qbc::runtime
