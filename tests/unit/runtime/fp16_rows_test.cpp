// The executor's fp16 memory format through a vector instruction (scale, fp16): every one of
// the 65536 half bit patterns is loaded and stored back exactly (x * 1), and products that
// are not fp16 values (normal, subnormal, overflowing) round as numerics::round_fp16 does.
// Row lengths that are not multiples of 8 take the tail path of the vector conversions.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "qbc/numerics/elementwise.h"
#include "test_bundle.h"
#include "test_support.h"

namespace qbc::runtime {
namespace {

using testing::BundleBuilder;

/// y = fp16(x * factor) on the device, x given as fp16 bit patterns [n].
std::vector<uint16_t> scale_on_device(const std::vector<uint16_t>& x, float factor) {
  const int64_t n = static_cast<int64_t>(x.size());
  BundleBuilder bb(1, 1, 4 * n + 1024);
  const int32_t in = bb.dram("in", isa::Purpose::kActivations, 2 * n);
  const int32_t out = bb.dram("out", isa::Purpose::kActivations, 2 * n);
  const int32_t a = bb.sram("a", 0, 2 * n), y = bb.sram("y", 0, 2 * n);
  bb.copy(0, bb.ref(a), bb.ref(in), 2 * n);
  isa::Eltwise e;
  e.op = isa::EltOp::kScale;
  e.a = bb.ref(a);
  e.y = bb.ref(y);
  e.width = n;
  e.factor = factor;
  bb.emit(0, e);
  bb.copy(0, bb.ref(out), bb.ref(y), 2 * n);
  std::shared_ptr<Device> d = testing::make_device(bb.finish());
  if (d == nullptr) return {};
  testing::write(*d, in, testing::raw_bytes(x));
  const Status s = d->run(isa::Phase::kDecode, 0, 0, 1);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return testing::values_of<uint16_t>(testing::read(*d, out, 2 * n));
}

TEST(RuntimeFp16Rows, EveryPatternRoundTripsExactly) {
  std::vector<uint16_t> x(65536 + 5);  // + a tail of 5
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint16_t>(i);
  const std::vector<uint16_t> y = scale_on_device(x, 1.0f);
  ASSERT_EQ(y.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(numerics::fp16_from_bits(x[i]))) {
      ASSERT_TRUE(std::isnan(numerics::fp16_from_bits(y[i]))) << i;
    } else {
      ASSERT_EQ(y[i], x[i]) << i;
    }
  }
}

TEST(RuntimeFp16Rows, ProductsRoundLikeRoundFp16) {
  for (float factor : {1.0001f, 0.3333f, 2.9e-3f, 40.0f}) {
    std::vector<uint16_t> x;
    for (uint32_t b = 0; b < 65536; b += 7) {
      if (!std::isnan(numerics::fp16_from_bits(static_cast<uint16_t>(b))))
        x.push_back(static_cast<uint16_t>(b));
    }
    const std::vector<uint16_t> y = scale_on_device(x, factor);
    ASSERT_EQ(y.size(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const float v = numerics::fp16_from_bits(x[i]);
      float want = 0.0f;
      numerics::scale(&v, 1, factor, true, &want);
      ASSERT_EQ(y[i], numerics::fp16_bits(want)) << v << " * " << factor;
    }
  }
}

}  // namespace
}  // namespace qbc::runtime
