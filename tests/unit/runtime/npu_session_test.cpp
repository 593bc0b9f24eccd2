// NpuSession, the Runner over a device slot, on a tiny hand-made "model": the host
// embedding, rope at the call's positions, then a quantized lm_head with fp32 logits
// (quantize, matmul, requant). Forward splits a prompt into chunk-sized prefill calls (a last
// chunk of one token included) and runs a one-token forward as a decode call, matches the
// per-token reference in any split, refuses to pass the
// cache capacity, restarts at 0 after reset, and two slots of one device keep their own
// positions.
#include "qbc/runtime/npu_session.h"

#include <gtest/gtest.h>

#include <vector>

#include "head_model.h"
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
using testing::kChunk;
using testing::kEmbedRows;
using testing::kHidden;
using testing::kMaxCache;
using testing::kVocab;
using testing::make_model;
using testing::Model;

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
  // Prefill calls of 3, 3 and 1 tokens: the decode program (the only writer of scratch, 4 bytes
  // a call) does not run for the prompt's last chunk of one token.
  QBC_ASSERT_OK(s->forward(kTokens, &logits));
  EXPECT_EQ(s->position(), 7);
  EXPECT_TRUE(testing::same_bits(logits, reference(m, kTokens, 0)));
  EXPECT_EQ(d->counters()[0].dram_written[static_cast<int>(isa::Purpose::kScratch)], 0);
  // Token by token (decode only) from a reset gives the same bits.
  s->reset();
  EXPECT_EQ(s->position(), 0);
  std::vector<float> all, one;
  for (int32_t t : kTokens) {
    QBC_ASSERT_OK(s->forward({t}, &one));
    all.insert(all.end(), one.begin(), one.end());
  }
  EXPECT_TRUE(testing::same_bits(all, logits));
  EXPECT_EQ(d->counters()[0].dram_written[static_cast<int>(isa::Purpose::kScratch)], 4 * 7);
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
