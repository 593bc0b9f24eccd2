// Device::create's checks and Device::run's arguments: the selected scheme must exist (the
// error lists the schemes present), the verify hook runs first, buffers must fit DRAM and
// SRAM, instructions must name their core's SRAM and bound loop variables, divisions need
// positive constants; the image lands at image_base; run refuses bad slots, token counts
// and positions past the cache.
#include <gtest/gtest.h>

#include <vector>

#include "test_bundle.h"
#include "test_support.h"

namespace qbc::runtime {
namespace {

using isa::Expr;
using qbc::testing::contains;
using testing::BundleBuilder;

Status create_status(std::shared_ptr<isa::Bundle> b, DeviceOptions o = DeviceOptions()) {
  o.host_threads = 1;
  return Device::create(std::move(b), o).status();
}

/// A bundle with one SRAM and one DRAM buffer and a copy between them.
BundleBuilder copy_bundle(int32_t* dram = nullptr, int32_t* sram = nullptr) {
  BundleBuilder bb;
  const int32_t d = bb.dram("d", isa::Purpose::kActivations, 64);
  const int32_t s = bb.sram("s", 0, 64);
  bb.copy(0, bb.ref(s), bb.ref(d), 64);
  if (dram != nullptr) *dram = d;
  if (sram != nullptr) *sram = s;
  return bb;
}

TEST(RuntimeDevice, MissingSchemeListsTheSchemesPresent) {
  BundleBuilder bb = copy_bundle();
  DeviceOptions o;
  o.scheme = isa::Scheme::kGlobal4;
  const Status s = create_status(bb.finish(), o);
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_TRUE(contains(s.message(), "'global4' (present: single)")) << s.message();
}

TEST(RuntimeDevice, VerifyHookRunsFirst) {
  BundleBuilder bb = copy_bundle();
  DeviceOptions o;
  int calls = 0;
  o.verify = [&](const isa::Bundle&) {
    ++calls;
    return failed_precondition("invariant 4 broken at prefill core 0 instr 0");
  };
  const Status s = create_status(bb.finish(), o);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
  EXPECT_EQ(s.message(), "bundle: invariant 4 broken at prefill core 0 instr 0");
  o.verify = [&](const isa::Bundle&) { return ok_status(); };
  BundleBuilder good = copy_bundle();
  QBC_ASSERT_OK(create_status(good.finish(), o));
}

TEST(RuntimeDevice, BuffersMustFitTheirSpace) {
  {
    BundleBuilder bb = copy_bundle();
    bb.bundle().buffers[1].bytes = (1 << 16) + 1;  // beyond sram_bytes
    const Status s = create_status(bb.finish());
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_TRUE(contains(s.message(), "buffer 's'")) << s.message();
  }
  {
    BundleBuilder bb = copy_bundle();
    std::shared_ptr<isa::Bundle> b = bb.finish();
    b->dram_bytes = 32;
    const Status s = create_status(b);
    EXPECT_EQ(s.code(), Code::kResourceExhausted);
    EXPECT_TRUE(contains(s.message(), "beyond the device's 32")) << s.message();
  }
}

TEST(RuntimeDevice, InstructionsAreCheckedBeforeRunning) {
  struct Bad {
    const char* want;
    std::function<void(BundleBuilder&, int32_t dram, int32_t sram)> edit;
  };
  const Bad cases[] = {
      {"is not in the SRAM of core 0",
       [](BundleBuilder& bb, int32_t d, int32_t s) {
         isa::Eltwise e;
         e.op = isa::EltOp::kScale;
         e.a = bb.ref(d);  // compute on DRAM
         e.y = bb.ref(s);
         e.width = 4;
         bb.emit(0, e);
       }},
      {"reads loop variable i3 outside its loop",
       [](BundleBuilder& bb, int32_t d, int32_t s) {
         bb.copy(0, bb.ref(s), bb.ref(d, Expr::loop(3)), 4);
       }},
      {"divides by something other than a positive constant",
       [](BundleBuilder& bb, int32_t d, int32_t s) {
         bb.copy(0, bb.ref(s), bb.ref(d), 4, Expr(4).floordiv(Expr::sym(isa::Sym::kSeq)));
       }},
      {"leaves its enclosing body",
       [](BundleBuilder& bb, int32_t, int32_t) {
         bb.emit(0, isa::Loop{0, 2, 5});
       }},
      {"attention 0 does not exist",
       [](BundleBuilder& bb, int32_t, int32_t s) {
         isa::AttnOut o;
         o.attn = 0;
         o.y = bb.ref(s);
         bb.emit(0, o);
       }},
      {"not between DRAM and the SRAM of core 0",
       [](BundleBuilder& bb, int32_t d, int32_t) { bb.copy(0, bb.ref(d), bb.ref(d), 4); }},
      {"matmul of f16 x i8 -> i32",
       [](BundleBuilder& bb, int32_t, int32_t s) {
         isa::MatMul m;
         m.x = m.w = m.acc = bb.ref(s);
         m.xtype = isa::DType::kF16;
         bb.emit(0, m);
       }},
  };
  for (const Bad& c : cases) {
    int32_t d = -1, s = -1;
    BundleBuilder bb = copy_bundle(&d, &s);
    c.edit(bb, d, s);
    const Status st = create_status(bb.finish());
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << c.want;
    EXPECT_TRUE(contains(st.message(), c.want)) << st.message();
    EXPECT_TRUE(contains(st.message(), "core 0 instr 1")) << st.message();
  }
}

TEST(RuntimeDevice, ImageLandsAtImageBase) {
  BundleBuilder bb;
  const int32_t w = bb.dram("w", isa::Purpose::kWeights, 8);
  std::shared_ptr<isa::Bundle> b = bb.finish();
  b->buffers[static_cast<size_t>(w)].offset = 128;
  b->image_base = 128;
  b->image = {1, 2, 3, 4, 5, 6, 7, 8};
  std::shared_ptr<Device> d = testing::make_device(b);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->dram_size(), 136);
  EXPECT_EQ(testing::read(*d, w, 8), b->image);
  EXPECT_EQ(d->dram(128, 9), nullptr);
  EXPECT_EQ(d->dram(-1, 1), nullptr);
  EXPECT_NE(d->dram(0, 136), nullptr);
}

TEST(RuntimeDevice, RunRefusesBadArguments) {
  BundleBuilder bb = copy_bundle();
  std::shared_ptr<Device> d = testing::make_device(bb.finish());
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->run(isa::Phase::kDecode, 1, 0, 1).code(), Code::kInvalidArgument);
  EXPECT_EQ(d->run(isa::Phase::kDecode, 0, 0, 2).code(), Code::kInvalidArgument);
  EXPECT_EQ(d->run(isa::Phase::kPrefill, 0, 0, 9).code(), Code::kInvalidArgument);
  const Status s = d->run(isa::Phase::kPrefill, 0, 60, 5);
  EXPECT_EQ(s.code(), Code::kResourceExhausted);
  EXPECT_TRUE(contains(s.message(), "max_cache 64")) << s.message();
  QBC_ASSERT_OK(d->run(isa::Phase::kPrefill, 0, 59, 5));
}

TEST(RuntimeDevice, HugeSizesFailTheBoundsCheckInsteadOfWrapping) {
  int32_t d = -1, s = -1;
  BundleBuilder bb = copy_bundle(&d, &s);
  isa::MatMul m;  // 2^40 x 2^40 x 2^30: every byte extent overflows int64
  m.x = m.w = m.acc = bb.ref(s);
  m.rows = int64_t{1} << 30;
  m.n = int64_t{1} << 40;
  m.kt = int64_t{1} << 40;
  m.ldx = m.kt;
  bb.emit(0, m);
  std::shared_ptr<Device> dev = testing::make_device(bb.finish());
  ASSERT_NE(dev, nullptr);
  const Status st = dev->run(isa::Phase::kDecode, 0, 0, 1);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(st.message(), "outside buffer 's'")) << st.message();
}

}  // namespace
}  // namespace qbc::runtime
