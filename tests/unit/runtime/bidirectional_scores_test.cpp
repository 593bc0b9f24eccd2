// qk_scores of a bidirectional attention (isa::AttnDesc::bidirectional, a vision tower's
// full_attention; docs/npu.md "Feature bundles"): every query row sees the keys [0, qpos0],
// against numerics::key_score, where a causal attention's row r sees [0, qpos0 + r].
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "qbc/numerics/attention.h"
#include "test_bundle.h"
#include "test_support.h"

namespace qbc::runtime {
namespace {

using isa::Expr;
using testing::BundleBuilder;

constexpr int64_t kDim = 8, kKeys = 8, kRows = 3;

struct ScoresCase {
  const char* name;
  bool bidirectional;
  int64_t qpos0;
};

class RuntimeBidirectionalScores : public ::testing::TestWithParam<ScoresCase> {};

TEST_P(RuntimeBidirectionalScores, RowsSeeTheKeyRangeOfTheirMask) {
  const ScoresCase& c = GetParam();
  isa::AttnDesc d;
  d.heads = d.kv_heads = 1;
  d.head_dim = kDim;
  d.capacity = kKeys;
  d.scale = 1.0 / std::sqrt(static_cast<double>(kDim));
  d.bidirectional = c.bidirectional;
  numerics::Attention a;
  a.heads = a.kv_heads = 1;
  a.head_dim = kDim;
  a.scale = d.scale;
  a.quantized = true;
  // The parameter block: q_scale[1], then k_scale, v_scale, k_offset, v_offset, k_rot_offset.
  std::vector<float> block = {0.02f};
  for (int part = 0; part < 5; ++part) {
    for (int64_t i = 0; i < kDim; ++i) block.push_back(part < 2 ? 0.01f : 0.0f);
  }
  const std::vector<int32_t> qcodes = testing::random_codes(kRows * kDim, 7, -127, 127);
  const std::vector<int32_t> kcodes = testing::random_codes(kKeys * kDim, 8, -127, 127);
  std::vector<int8_t> k8(kcodes.begin(), kcodes.end());
  const std::vector<float> mq = {0.011f, 0.007f, 0.013f};

  BundleBuilder bb(1, 1, 1 << 16, kRows, kKeys);
  bb.bundle().attentions.push_back(d);
  const int32_t params_d = bb.weights("params", testing::raw_bytes(block));
  const int32_t qc_d = bb.weights("qcodes", testing::raw_bytes(qcodes));
  const int32_t mq_d = bb.weights("mq", testing::raw_bytes(mq));
  const int32_t kc_d = bb.weights("kcodes", testing::raw_bytes(k8));
  const int32_t sc_d = bb.dram("scores", isa::Purpose::kActivations, kRows * kKeys * 4);
  const int32_t params_s = bb.sram("params", 0, static_cast<int64_t>(block.size()) * 4);
  const int32_t qc_s = bb.sram("qcodes", 0, kRows * kDim * 4);
  const int32_t mq_s = bb.sram("mq", 0, kRows * 4);
  const int32_t kc_s = bb.sram("kcodes", 0, kKeys * kDim);
  const int32_t sc_s = bb.sram("scores", 0, kRows * kKeys * 4);
  bb.copy(0, bb.ref(params_s), bb.ref(params_d), static_cast<int64_t>(block.size()) * 4);
  bb.copy(0, bb.ref(qc_s), bb.ref(qc_d), kRows * kDim * 4);
  bb.copy(0, bb.ref(mq_s), bb.ref(mq_d), kRows * 4);
  bb.copy(0, bb.ref(kc_s), bb.ref(kc_d), kKeys * kDim);
  isa::QkScores qk;
  qk.qcodes = bb.ref(qc_s);
  qk.mq = bb.ref(mq_s);
  qk.kcodes = bb.ref(kc_s);
  qk.params = bb.ref(params_s);
  qk.scores = bb.ref(sc_s);
  qk.rows = Expr(kRows);
  qk.qpos0 = Expr(c.qpos0);
  qk.kpos0 = Expr(0);
  qk.bc = kKeys;
  qk.kv_head = 0;
  qk.attn = 0;
  bb.emit(0, qk);
  bb.copy(0, bb.ref(sc_d), bb.ref(sc_s), kRows * kKeys * 4);
  std::shared_ptr<Device> dev = testing::make_device(bb.finish(), 1);
  ASSERT_NE(dev, nullptr);
  QBC_ASSERT_OK(dev->run(isa::Phase::kPrefill, 0, 0, kRows));
  const std::vector<float> got =
      testing::values_of<float>(testing::read(*dev, sc_d, kRows * kKeys * 4));

  std::vector<float> want(static_cast<size_t>(kRows * kKeys));
  for (int64_t r = 0; r < kRows; ++r) {
    numerics::QueryCodes q;
    q.codes.assign(qcodes.begin() + r * kDim, qcodes.begin() + (r + 1) * kDim);
    q.mq = mq[static_cast<size_t>(r)];
    const int64_t last = c.bidirectional ? c.qpos0 : c.qpos0 + r;
    for (int64_t j = 0; j < kKeys; ++j) {
      want[static_cast<size_t>(r * kKeys + j)] =
          j <= last ? numerics::key_score(q, nullptr, kcodes.data() + j * kDim, nullptr, a)
                    : -std::numeric_limits<float>::infinity();
    }
  }
  EXPECT_TRUE(testing::same_bits(got, want));
  // Row 2 sees keys up to qpos0 + 2 causally, only up to qpos0 bidirectionally.
  if (c.qpos0 + 1 < kKeys) {
    const float row2_next = got[static_cast<size_t>(2 * kKeys + c.qpos0 + 1)];
    EXPECT_EQ(std::isinf(row2_next), c.bidirectional);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, RuntimeBidirectionalScores,
                         ::testing::Values(ScoresCase{"bidirectional_all_keys", true, 7},
                                           ScoresCase{"bidirectional_first_five", true, 4},
                                           ScoresCase{"causal_first_five", false, 4}),
                         [](const ::testing::TestParamInfo<ScoresCase>& i) {
                           return std::string(i.param.name);
                         });

}  // namespace
}  // namespace qbc::runtime
