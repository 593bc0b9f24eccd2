// dma: ring addressing on the DRAM side (rows wrap at the ring's end, a negative first row
// wraps backwards), strided gathers, the byte counters by purpose, loads from read-only
// weights that alias DRAM instead of copying (the same bytes for every reader), and an
// access outside its buffer reported with the instruction, its node and the buffer.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "test_bundle.h"
#include "test_support.h"

namespace qbc::runtime {
namespace {

using isa::Expr;
using testing::BundleBuilder;

const Expr kSeq = Expr::sym(isa::Sym::kSeq);
const Expr kStart = Expr::sym(isa::Sym::kStart);

constexpr int64_t kRow = 12, kRingRows = 5, kRingStride = 16;

std::vector<uint8_t> iota_bytes(size_t n, uint8_t first) {
  std::vector<uint8_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(RuntimeDma, RingRowsWrapAroundTheRing) {
  BundleBuilder bb(1, 1, 1 << 12, /*chunk=*/8);
  const int32_t in = bb.dram("in", isa::Purpose::kActivations, 8 * kRow);
  const int32_t ring = bb.dram("ring", isa::Purpose::kKv, kRingRows * kRingStride);
  const int32_t out = bb.dram("out", isa::Purpose::kActivations, 8 * kRow);
  const int32_t s_in = bb.sram("in", 0, 8 * kRow), s_back = bb.sram("back", 0, 8 * kRow);
  bb.copy(0, bb.ref(s_in), bb.ref(in), kRow, kSeq);
  isa::Dma st;  // rows 0..seq-1 to ring rows (start + r) mod 5
  st.dst = bb.ref(ring);
  st.src = bb.ref(s_in);
  st.rows = kSeq;
  st.row_bytes = kRow;
  st.src_stride = kRow;
  st.ring_rows = kRingRows;
  st.ring_stride = kRingStride;
  st.ring_row0 = kStart;
  bb.emit(0, st);
  isa::Dma ld = st;  // read back from ring row start - 8 (negative: wraps to (start - 8) mod 5)
  ld.dst = bb.ref(s_back);
  ld.src = bb.ref(ring);
  ld.src_stride = 0;
  ld.dst_stride = kRow;
  ld.ring_row0 = kStart - 8;
  bb.emit(0, ld);
  bb.copy(0, bb.ref(out), bb.ref(s_back), kRow, kSeq);
  std::shared_ptr<Device> d = testing::make_device(bb.finish());
  ASSERT_NE(d, nullptr);
  const std::vector<uint8_t> x = iota_bytes(8 * kRow, 1);
  testing::write(*d, in, x);
  const int64_t start = 3, seq = 4;
  QBC_ASSERT_OK(d->run(isa::Phase::kPrefill, 0, start, seq));
  // Ring rows 3, 4, 0, 1 hold input rows 0..3; row 2 and every row's last 4 bytes stay 0.
  const std::vector<uint8_t> r = testing::read(*d, ring, kRingRows * kRingStride);
  std::vector<uint8_t> want(kRingRows * kRingStride, 0);
  for (int64_t i = 0; i < seq; ++i) {
    const int64_t rr = (start + i) % kRingRows;
    std::copy_n(x.begin() + i * kRow, kRow, want.begin() + rr * kRingStride);
  }
  EXPECT_EQ(r, want);
  // Read back from ring row (3 - 8) mod 5 = 0: ring rows 0, 1, 2, 3 = input rows 2, 3, -, 0.
  const std::vector<uint8_t> o = testing::read(*d, out, seq * kRow);
  for (int64_t i = 0; i < seq; ++i) {
    const int64_t rr = ((start - 8 + i) % kRingRows + kRingRows) % kRingRows;
    const std::vector<uint8_t> got(o.begin() + i * kRow, o.begin() + (i + 1) * kRow);
    const std::vector<uint8_t> ring_row(want.begin() + rr * kRingStride,
                                        want.begin() + rr * kRingStride + kRow);
    EXPECT_EQ(got, ring_row) << "row " << i;
  }
  const CoreCounters& k = d->counters()[0];
  const int kv = static_cast<int>(isa::Purpose::kKv),
            act = static_cast<int>(isa::Purpose::kActivations);
  EXPECT_EQ(k.dram_written[kv], seq * kRow);
  EXPECT_EQ(k.dram_read[kv], seq * kRow);
  EXPECT_EQ(k.dram_read[act], seq * kRow);
  EXPECT_EQ(k.dram_written[act], seq * kRow);
  EXPECT_EQ(k.dma, 4);
}

TEST(RuntimeDma, StridedRowsGatherAndScatter) {
  BundleBuilder bb;
  const int32_t in = bb.dram("in", isa::Purpose::kWeights, 6 * 20);
  const int32_t out = bb.dram("out", isa::Purpose::kScratch, 6 * 8);
  const int32_t s = bb.sram("s", 0, 6 * 8);
  isa::Dma g;  // rows of 8 bytes at a 20-byte stride, packed in SRAM
  g.dst = bb.ref(s);
  g.src = bb.ref(in, Expr(4));
  g.rows = 6;
  g.row_bytes = 8;
  g.src_stride = 20;
  g.dst_stride = 8;
  bb.emit(0, g);
  bb.copy(0, bb.ref(out), bb.ref(s), 6 * 8);
  std::shared_ptr<Device> d = testing::make_device(bb.finish());
  ASSERT_NE(d, nullptr);
  const std::vector<uint8_t> x = iota_bytes(6 * 20, 0);
  testing::write(*d, in, x);
  QBC_ASSERT_OK(d->run(isa::Phase::kDecode, 0, 0, 1));
  const std::vector<uint8_t> o = testing::read(*d, out, 6 * 8);
  for (int r = 0; r < 6; ++r) {
    for (int i = 0; i < 8; ++i) EXPECT_EQ(o[r * 8 + i], x[4 + r * 20 + i]);
  }
  EXPECT_EQ(d->counters()[0].dram_read[static_cast<int>(isa::Purpose::kWeights)], 48);
  EXPECT_EQ(d->counters()[0].dram_written[static_cast<int>(isa::Purpose::kScratch)], 48);
}

// Large loads from read-only weights leave an alias instead of a copy (the dma kernel): every
// access must still see the bytes a copy leaves, whatever overwrites part of the tile.
TEST(RuntimeDma, AliasedWeightLoadsReadAsCopies) {
  constexpr int64_t kTile = 8192;
  BundleBuilder bb(1, 1, 1 << 16, /*chunk=*/8);
  const std::vector<uint8_t> w1 = iota_bytes(kTile, 3), w2 = iota_bytes(kTile, 101);
  const int32_t wa = bb.weights("wa", w1), wb = bb.weights("wb", w2);
  const int32_t act = bb.dram("act", isa::Purpose::kActivations, 64);
  const int32_t out1 = bb.dram("out1", isa::Purpose::kScratch, kTile);
  const int32_t out2 = bb.dram("out2", isa::Purpose::kScratch, kTile);
  const int32_t s = bb.sram("tile", 0, kTile);
  bb.copy(0, bb.ref(s), bb.ref(wa), kTile);       // alias
  bb.copy(0, bb.ref(s, 1000), bb.ref(act), 64);   // overwrites part of it
  bb.copy(0, bb.ref(out1), bb.ref(s), kTile);     // W1 with act at 1000
  bb.copy(0, bb.ref(s), bb.ref(wa), 4096, 2);     // alias again (2 contiguous rows)
  bb.copy(0, bb.ref(s, 4096), bb.ref(wb), 4096);  // a second alias over half of it
  bb.copy(0, bb.ref(out2), bb.ref(s), kTile);     // W1[0, 4096) + W2[0, 4096)
  std::shared_ptr<Device> d = testing::make_device(bb.finish());
  ASSERT_NE(d, nullptr);
  const std::vector<uint8_t> a = iota_bytes(64, 200);
  testing::write(*d, act, a);
  QBC_ASSERT_OK(d->run(isa::Phase::kPrefill, 0, 0, 1));
  std::vector<uint8_t> want1 = w1;
  std::copy(a.begin(), a.end(), want1.begin() + 1000);
  EXPECT_EQ(testing::read(*d, out1, kTile), want1);
  std::vector<uint8_t> want2(w1.begin(), w1.begin() + 4096);
  want2.insert(want2.end(), w2.begin(), w2.begin() + 4096);
  EXPECT_EQ(testing::read(*d, out2, kTile), want2);
  // The counters are those of copies.
  const CoreCounters& k = d->counters()[0];
  EXPECT_EQ(k.dram_read[static_cast<int>(isa::Purpose::kWeights)], 2 * kTile + 4096);
  EXPECT_EQ(k.dram_read[static_cast<int>(isa::Purpose::kActivations)], 64);
  EXPECT_EQ(k.dram_written[static_cast<int>(isa::Purpose::kScratch)], 2 * kTile);
}

TEST(RuntimeDma, PiecesOfAnAliasReadAndOverwrittenKeepTheirBytes) {
  constexpr int64_t kTile = 8192;
  BundleBuilder bb(1, 1, 1 << 16, /*chunk=*/8);
  const std::vector<uint8_t> w = iota_bytes(kTile, 11);
  const int32_t wb = bb.weights("w", w);
  const int32_t act = bb.dram("act", isa::Purpose::kActivations, 3 * 16);
  const int32_t rows = bb.dram("rows", isa::Purpose::kScratch, 3 * 16);
  const int32_t out = bb.dram("out", isa::Purpose::kScratch, kTile);
  const int32_t s = bb.sram("tile", 0, kTile);
  bb.copy(0, bb.ref(s), bb.ref(wb), kTile);
  isa::Dma st;  // three strided 16-byte rows of the tile (copied in piece by piece)
  st.dst = bb.ref(rows);
  st.src = bb.ref(s, 100);
  st.rows = 3;
  st.row_bytes = 16;
  st.src_stride = 2000;
  st.dst_stride = 16;
  bb.emit(0, st);
  isa::Dma ld = st;  // three strided rows of new bytes into the tile
  ld.dst = bb.ref(s, 50);
  ld.src = bb.ref(act);
  ld.src_stride = 16;
  ld.dst_stride = 3000;
  bb.emit(0, ld);
  bb.copy(0, bb.ref(out), bb.ref(s), kTile);
  std::shared_ptr<Device> d = testing::make_device(bb.finish());
  ASSERT_NE(d, nullptr);
  const std::vector<uint8_t> a = iota_bytes(3 * 16, 230);
  testing::write(*d, act, a);
  QBC_ASSERT_OK(d->run(isa::Phase::kPrefill, 0, 0, 1));
  std::vector<uint8_t> want_rows, want = w;
  for (int r = 0; r < 3; ++r) {
    want_rows.insert(want_rows.end(), w.begin() + 100 + r * 2000, w.begin() + 116 + r * 2000);
    std::copy_n(a.begin() + r * 16, 16, want.begin() + 50 + r * 3000);
  }
  EXPECT_EQ(testing::read(*d, rows, 3 * 16), want_rows);
  EXPECT_EQ(testing::read(*d, out, kTile), want);
}

TEST(RuntimeDma, SramLoadedFromWeightsKeepsItsBytesAcrossCalls) {
  constexpr int64_t kTile = 8192;
  BundleBuilder bb(1, 1, 1 << 16, /*chunk=*/8);
  const std::vector<uint8_t> w = iota_bytes(kTile, 7);
  const int32_t wb = bb.weights("w", w);
  const int32_t out = bb.dram("out", isa::Purpose::kScratch, kTile);
  const int32_t s = bb.sram("tile", 0, kTile);
  auto dma = [&](isa::Ref dst, isa::Ref src, isa::Queue q) {
    isa::Dma d;
    d.dst = dst;
    d.src = src;
    d.row_bytes = kTile;
    d.src_stride = d.dst_stride = kTile;
    isa::Instr in;
    in.op = d;
    in.queue = q;
    return in;
  };
  // Prefill loads the tile; decode stores what SRAM holds.
  bb.code(isa::Phase::kPrefill, 0).push_back(dma(bb.ref(s), bb.ref(wb), isa::Queue::kLoad));
  bb.code(isa::Phase::kDecode, 0).push_back(dma(bb.ref(out), bb.ref(s), isa::Queue::kStore));
  std::shared_ptr<Device> d = testing::make_device(bb.finish());
  ASSERT_NE(d, nullptr);
  QBC_ASSERT_OK(d->run(isa::Phase::kPrefill, 0, 0, 1));
  testing::write(*d, wb, std::vector<uint8_t>(kTile, 0));  // the host rewrites the weights
  QBC_ASSERT_OK(d->run(isa::Phase::kDecode, 0, 1, 1));
  EXPECT_EQ(testing::read(*d, out, kTile), w);
}

TEST(RuntimeDma, WeightsAProgramWritesAreCopiedNotAliased) {
  constexpr int64_t kTile = 8192;
  BundleBuilder bb(1, 1, 1 << 16, /*chunk=*/8);
  const std::vector<uint8_t> w = iota_bytes(kTile, 9);
  const int32_t wb = bb.weights("w", w);
  const int32_t out = bb.dram("out", isa::Purpose::kScratch, kTile);
  const int32_t s = bb.sram("tile", 0, kTile), z = bb.sram("zeros", 0, kTile);
  bb.copy(0, bb.ref(s), bb.ref(wb), kTile);   // load the weights
  bb.copy(0, bb.ref(wb), bb.ref(z), kTile);   // then overwrite them in DRAM
  bb.copy(0, bb.ref(out), bb.ref(s), kTile);  // SRAM still holds what was loaded
  std::shared_ptr<Device> d = testing::make_device(bb.finish());
  ASSERT_NE(d, nullptr);
  QBC_ASSERT_OK(d->run(isa::Phase::kPrefill, 0, 0, 1));
  EXPECT_EQ(testing::read(*d, out, kTile), w);
  EXPECT_EQ(testing::read(*d, wb, kTile), std::vector<uint8_t>(kTile, 0));
}

TEST(RuntimeDma, AccessOutsideItsBufferNamesInstructionNodeAndBuffer) {
  BundleBuilder bb(1, 1, 1 << 12, /*chunk=*/8);
  const int32_t in = bb.dram("in", isa::Purpose::kActivations, 8 * kRow);
  const int32_t s = bb.sram("tile", 0, 4 * kRow);  // holds 4 rows only
  const int32_t node = bb.node("blk.2.attn.k_proj");
  bb.emit(0, isa::Barrier{1, 1});
  isa::Dma d;
  d.dst = bb.ref(s);
  d.src = bb.ref(in);
  d.rows = kSeq;
  d.row_bytes = kRow;
  d.src_stride = kRow;
  d.dst_stride = kRow;
  bb.emit(0, d, node);
  std::shared_ptr<Device> dev = testing::make_device(bb.finish());
  ASSERT_NE(dev, nullptr);
  QBC_ASSERT_OK(dev->run(isa::Phase::kPrefill, 0, 0, 4));
  const Status st = dev->run(isa::Phase::kPrefill, 0, 0, 5);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  for (const char* part : {"prefill core 0 instr 1 (dma, node 'blk.2.attn.k_proj')", "dst",
                           "[0, 60)", "buffer 'tile' (48 bytes)"}) {
    EXPECT_TRUE(qbc::testing::contains(st.message(), part)) << st.message();
  }
}

}  // namespace
}  // namespace qbc::runtime
