// The interpreter and the barrier scheduler: cores exchange values through DRAM across a
// barrier (the reader sees the writer's values with one and with two host threads), loops
// with runtime trip counts (nested, zero-trip), counted barriers over a subset of the
// cores, deadlocks and over-full barriers reported, and the counters add up.
#include <gtest/gtest.h>

#include <vector>

#include "qbc/numerics/elementwise.h"
#include "test_bundle.h"
#include "test_support.h"

namespace qbc::runtime {
namespace {

using isa::Expr;
using testing::BundleBuilder;

const Expr kSeq = Expr::sym(isa::Sym::kSeq);
constexpr int64_t kW = 16;

isa::Eltwise scale_op(isa::Ref a, isa::Ref y, Expr rows, float f) {
  isa::Eltwise e;
  e.op = isa::EltOp::kScale;
  e.a = a;
  e.y = y;
  e.rows = rows;
  e.width = kW;
  e.factor = f;
  return e;
}

/// Core 1 reads what core 0 wrote to DRAM scratch before barrier 1, then writes a second
/// value that core 0 reads after barrier 2: y = 3 * (2 * x).
std::vector<float> exchange(int threads, const std::vector<float>& x, CoreCounters* k0) {
  BundleBuilder bb(2);
  const int32_t in = bb.dram("in", isa::Purpose::kActivations, kW * 2);
  const int32_t mid = bb.dram("mid", isa::Purpose::kScratch, kW * 2);
  const int32_t back = bb.dram("back", isa::Purpose::kScratch, kW * 2);
  const int32_t out = bb.dram("out", isa::Purpose::kActivations, kW * 2);
  const int32_t a0 = bb.sram("a", 0, kW * 2), b0 = bb.sram("b", 0, kW * 2);
  const int32_t a1 = bb.sram("a", 1, kW * 2), b1 = bb.sram("b", 1, kW * 2);
  bb.copy(0, bb.ref(a0), bb.ref(in), kW * 2);
  bb.emit(0, scale_op(bb.ref(a0), bb.ref(b0), 1, 2.0f));
  bb.copy(0, bb.ref(mid), bb.ref(b0), kW * 2);
  bb.emit(0, isa::Barrier{1, 2});
  bb.emit(0, isa::Barrier{2, 2});
  bb.copy(0, bb.ref(a0), bb.ref(back), kW * 2);
  bb.copy(0, bb.ref(out), bb.ref(a0), kW * 2);
  // Core 1's stream starts with the read: without the barrier it would see zeros.
  bb.emit(1, isa::Barrier{1, 2});
  bb.copy(1, bb.ref(a1), bb.ref(mid), kW * 2);
  bb.emit(1, scale_op(bb.ref(a1), bb.ref(b1), 1, 3.0f));
  bb.copy(1, bb.ref(back), bb.ref(b1), kW * 2);
  bb.emit(1, isa::Barrier{2, 2});
  std::shared_ptr<Device> d = testing::make_device(bb.finish(), threads);
  if (d == nullptr) return {};
  testing::write(*d, in, testing::f16_bytes(x));
  const Status s = d->run(isa::Phase::kDecode, 0, 0, 1);
  EXPECT_TRUE(s.ok()) << s.to_string();
  *k0 = d->counters()[0];
  return testing::f16_values(testing::read(*d, out, kW * 2));
}

TEST(RuntimeScheduler, CoresExchangeThroughDramAcrossBarriers) {
  const std::vector<float> x = testing::random_f16(kW, 7, 4.0f);
  std::vector<float> twice(kW), want(kW);
  numerics::scale(x.data(), kW, 2.0f, true, twice.data());
  numerics::scale(twice.data(), kW, 3.0f, true, want.data());
  CoreCounters k1, k2;
  EXPECT_TRUE(testing::same_bits(exchange(1, x, &k1), want));
  EXPECT_TRUE(testing::same_bits(exchange(2, x, &k2), want));
  EXPECT_EQ(k1.barriers, 2);
  EXPECT_EQ(k1.instructions, 7);
  EXPECT_EQ(k2.instructions, k1.instructions);
}

TEST(RuntimeScheduler, LoopsWithRuntimeTripCountsNestAndSkip) {
  BundleBuilder bb(1, 1, 1 << 12, /*chunk=*/8);
  const int32_t in = bb.dram("in", isa::Purpose::kActivations, 8 * kW * 2);
  const int32_t out = bb.dram("out", isa::Purpose::kActivations, 2 * 8 * kW * 2);
  const int32_t s = bb.sram("row", 0, kW * 2), t = bb.sram("scaled", 0, kW * 2);
  const Expr i0 = Expr::loop(0), i1 = Expr::loop(1);
  // for i0 < 2: for i1 < seq: out[i0*seq + i1] = (i0 + 1) * in[i1]   (scale by i0 + 1)
  bb.emit(0, isa::Loop{0, 2, 8});
  bb.emit(0, isa::Loop{1, kSeq, 3});
  bb.copy(0, bb.ref(s), bb.ref(in, i1 * Expr(kW * 2)), kW * 2);
  bb.emit(0, scale_op(bb.ref(s), bb.ref(t), 1, 1.0f));
  bb.copy(0, bb.ref(out, (i0 * kSeq + i1) * Expr(kW * 2)), bb.ref(t), kW * 2);
  bb.emit(0, isa::Loop{1, kSeq, 3});  // second pass doubles rows of the i0 = 1 copy
  bb.copy(0, bb.ref(s), bb.ref(out, (i0 * kSeq + i1) * Expr(kW * 2)), kW * 2);
  bb.emit(0, scale_op(bb.ref(s), bb.ref(t), 1, 2.0f));
  bb.copy(0, bb.ref(out, (i0 * kSeq + i1) * Expr(kW * 2)), bb.ref(t), kW * 2);
  // A zero-trip loop (seq - 5 = 0 at seq 5): its body would overwrite row 0.
  bb.emit(0, isa::Loop{0, kSeq - 5, 1});
  bb.copy(0, bb.ref(out), bb.ref(s), kW * 2);
  std::shared_ptr<Device> d = testing::make_device(bb.finish());
  ASSERT_NE(d, nullptr);
  const int64_t seq = 5;
  const std::vector<float> x = testing::random_f16(8 * kW, 9, 3.0f);
  testing::write(*d, in, testing::f16_bytes(x));
  QBC_ASSERT_OK(d->run(isa::Phase::kPrefill, 0, 0, seq));
  const std::vector<float> o = testing::f16_values(testing::read(*d, out, 2 * seq * kW * 2));
  for (int64_t r = 0; r < 2 * seq; ++r) {
    for (int64_t i = 0; i < kW; ++i) {
      const float want = numerics::round_fp16(2.0f * x[static_cast<size_t>((r % seq) * kW + i)]);
      ASSERT_EQ(o[static_cast<size_t>(r * kW + i)], want) << r << " " << i;
    }
  }
  const CoreCounters k = d->counters()[0];
  // 1 outer loop + 2 * (2 inner loops + 2 * seq * 3 body instructions) + 1 zero-trip loop.
  EXPECT_EQ(k.instructions, 1 + 2 * (2 + 2 * seq * 3) + 1);
  EXPECT_EQ(k.dma, 2 * 2 * seq * 2);
  EXPECT_EQ(k.vector_ops, 2 * 2 * seq * kW);
  const int act = static_cast<int>(isa::Purpose::kActivations);
  EXPECT_EQ(k.dram_read[act], 2 * 2 * seq * kW * 2);
  EXPECT_EQ(k.dram_written[act], k.dram_read[act]);
  // Counters accumulate over calls and reset to zero.
  QBC_ASSERT_OK(d->run(isa::Phase::kPrefill, 0, 0, seq));
  EXPECT_EQ(d->counters()[0].instructions, 2 * k.instructions);
  d->reset_counters();
  EXPECT_EQ(d->counters()[0].instructions, 0);
  EXPECT_EQ(d->counters()[0].dram_read[act], 0);
}

TEST(RuntimeScheduler, BarrierOverASubsetOfTheCores) {
  BundleBuilder bb(3);
  for (int c = 0; c < 2; ++c) bb.emit(c, isa::Barrier{1, 2});
  bb.emit(2, isa::Barrier{7, 1});  // core 2 alone
  std::shared_ptr<Device> d = testing::make_device(bb.finish(), 2);
  ASSERT_NE(d, nullptr);
  QBC_ASSERT_OK(d->run(isa::Phase::kDecode, 0, 0, 1));
  EXPECT_EQ(d->counters()[2].barriers, 1);
}

TEST(RuntimeScheduler, DeadlockAndOverfullBarriersAreErrors) {
  {
    BundleBuilder bb(2);
    bb.emit(0, isa::Barrier{1, 2});  // core 1 never arrives
    std::shared_ptr<Device> d = testing::make_device(bb.finish());
    ASSERT_NE(d, nullptr);
    const Status s = d->run(isa::Phase::kDecode, 0, 0, 1);
    EXPECT_EQ(s.code(), Code::kFailedPrecondition);
    EXPECT_TRUE(qbc::testing::contains(s.message(), "deadlock")) << s.message();
    EXPECT_TRUE(qbc::testing::contains(s.message(), "barrier 1: 1 of 2 cores")) << s.message();
  }
  {
    BundleBuilder bb(3);
    for (int c = 0; c < 3; ++c) bb.emit(c, isa::Barrier{4, 2});
    std::shared_ptr<Device> d = testing::make_device(bb.finish());
    ASSERT_NE(d, nullptr);
    const Status s = d->run(isa::Phase::kDecode, 0, 0, 1);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_TRUE(qbc::testing::contains(s.message(), "3 cores reached barrier 4, which counts 2"))
        << s.message();
  }
}

}  // namespace
}  // namespace qbc::runtime
