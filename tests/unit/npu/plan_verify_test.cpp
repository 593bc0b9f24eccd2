// The plan verifier (docs/npu.md "The plan verifier", P1..P10): a compiled plan verifies
// clean, and for each invariant one edit of that plan breaks it with a message naming the
// invariant and the node, value, stage or buffer; the printer writes every field, the same
// way every time.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "qbc/npu/compile.h"
#include "qbc/npu/plan.h"
#include "test_support.h"
#include "unit/npu/small_case.h"

namespace qbc {
namespace {

using npu::NodeKind;
using npu::Plan;
using ::qbc::testing::contains;

/// The plan of the small case through `pipeline` (shapes only), at `cache` positions.
StatusOr<Plan> compiled_plan(int64_t cache, const std::string& pipeline = "npu-compile") {
  QBC_ASSIGN_OR_RETURN(testing::Case c, testing::small_case(cache));
  Plan plan;
  QBC_RETURN_IF_ERROR(
      npu::run_pipeline(pipeline, c.graph, c.options, nullptr, {}, {}, nullptr, &plan).status());
  return plan;
}

class PlanVerify : public ::testing::Test {
 protected:
  void SetUp() override {
    QBC_REQUIRE_SHARED(cfg, "model-configs/SmolLM2-135M-Instruct/config.json");
    static const StatusOr<Plan> base = compiled_plan(512);
    QBC_ASSERT_OK(base);
    plan_ = *base;
  }

  /// The first node of `kind`.
  npu::NodePlan& first(NodeKind kind) {
    for (npu::NodePlan& n : plan_.nodes) {
      if (n.kind == kind) return n;
    }
    ADD_FAILURE() << "no node of that kind";
    return plan_.nodes.front();
  }

  /// The index of the first DRAM buffer whose name ends in `suffix`.
  size_t buffer(const std::string& suffix) {
    for (size_t i = 0; i < plan_.buffers.size(); ++i) {
      const std::string& n = plan_.buffers[i].name;
      if (n.size() >= suffix.size() &&
          n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0)
        return i;
    }
    ADD_FAILURE() << "no buffer " << suffix;
    return 0;
  }

  /// verify_plan fails with `code`, naming `invariant` and `what`.
  void expect_broken(Code code, const std::string& invariant, const std::string& what) {
    const Status s = npu::verify_plan(plan_);
    ASSERT_FALSE(s.ok()) << "expected " << invariant;
    EXPECT_EQ(s.code(), code) << s.message();
    EXPECT_EQ(s.message().rfind(invariant + " (", 0), 0u) << s.message();
    EXPECT_TRUE(contains(s.message(), what)) << s.message();
  }

  Plan plan_;
};

TEST_F(PlanVerify, CompiledPlanVerifiesClean) {
  QBC_ASSERT_OK(npu::verify_plan(plan_));
  EXPECT_TRUE(plan_.tiled && plan_.placed && plan_.fit_checked);
  ASSERT_FALSE(plan_.stages.empty());
  for (const npu::StagePlan& s : plan_.stages) {
    EXPECT_GT(s.used, 0) << s.name;  // lower recorded its allocation
    EXPECT_LE(s.used, plan_.sram_budget) << s.name;
  }
  int growing = 0;
  for (const npu::DramBuffer& b : plan_.buffers) growing += b.grows ? 1 : 0;
  EXPECT_EQ(growing, 4);  // K and V of the two global layers
}

TEST_F(PlanVerify, P1MalformedStageIndex) {
  first(NodeKind::kLinear).stage = static_cast<int32_t>(plan_.stages.size());
  expect_broken(Code::kInvalidArgument, "P1", "blk.0.");
}

TEST_F(PlanVerify, P2NodeWithoutTiles) {
  first(NodeKind::kLinear).linear.t.kt = 0;
  expect_broken(Code::kFailedPrecondition, "P2", "blk.0.");
}

// A second weight image's plan (bit.prefill / bit.decode) is held to P2 and P3 like the first.
TEST_F(PlanVerify, P2P3SecondWeightImage) {
  npu::NodePlan& n = first(NodeKind::kLinear);
  n.second = n.linear;
  n.second_for = isa::Phase::kDecode;
  QBC_ASSERT_OK(npu::verify_plan(plan_));
  n.second.t.kt = 0;
  expect_broken(Code::kFailedPrecondition, "P2", "its second image's qlinear tiles");
  n.second = n.linear;
  n.second.buf = -1;
  expect_broken(Code::kFailedPrecondition, "P3", "weight buffer #-1");
}

TEST_F(PlanVerify, P3TilesDoNotCoverTheShape) {
  npu::LinearPlan& l = first(NodeKind::kLinear).linear;
  l.t.nt = l.t.nt / 2 > 0 ? l.t.nt / 2 : 1;  // the tile count no longer covers n
  expect_broken(Code::kFailedPrecondition, "P3", "tiles nt");
}

TEST_F(PlanVerify, P3RingShorterThanTheWindow) {
  // SmolLM2 has no sliding window: every attention's capacity is the cache.
  first(NodeKind::kAttention).attention.capacity -= 1;
  expect_broken(Code::kFailedPrecondition, "P3", "capacity");
}

TEST_F(PlanVerify, P4StageOverTheBudget) {
  plan_.stages[1].used = plan_.sram_budget + 1;
  expect_broken(Code::kFailedPrecondition, "P4", plan_.stages[1].name);
}

TEST_F(PlanVerify, P5ValueWithoutAPlace) {
  npu::NodePlan& n = first(NodeKind::kRows);
  n.place.buf = -1;
  expect_broken(Code::kFailedPrecondition, "P5", "value %" + n.name + " has no place");
}

TEST_F(PlanVerify, P5PositionsHaveNoPlace) {
  plan_.nodes[static_cast<size_t>(plan_.positions)].place =
      plan_.nodes[static_cast<size_t>(plan_.embeds)].place;
  expect_broken(Code::kFailedPrecondition, "P5", "positions");
}

TEST_F(PlanVerify, P6LiveValuesShareBytes) {
  // The first activation value, and a later one defined while it is still live, with the
  // same row stride: put the later one on top of the first.
  size_t a = 0, b = 0;
  for (size_t i = 0; i < plan_.nodes.size() && b == 0; ++i) {
    const npu::NodePlan& n = plan_.nodes[i];
    if (n.kind == NodeKind::kSlice || n.place.buf < 0 ||
        plan_.buffers[static_cast<size_t>(n.place.buf)].purpose != isa::Purpose::kActivations)
      continue;
    for (size_t j = i + 1; j <= static_cast<size_t>(n.last_use) && b == 0; ++j) {
      const npu::NodePlan& m = plan_.nodes[j];
      if (m.kind != NodeKind::kSlice && m.place.buf == n.place.buf &&
          m.place.stride == n.place.stride) {
        a = i;
        b = j;
      }
    }
  }
  ASSERT_GT(b, 0u);
  plan_.nodes[b].place.col = plan_.nodes[a].place.col;
  expect_broken(Code::kFailedPrecondition, "P6", "value %" + plan_.nodes[a].name);
}

TEST_F(PlanVerify, P7WeightBuffersOverlap) {
  plan_.buffers[1].offset = plan_.buffers[0].offset;
  expect_broken(Code::kFailedPrecondition, "P7", plan_.buffers[0].name);
}

TEST_F(PlanVerify, P7PastTheDeviceOnceTheFitIsChecked) {
  plan_.dram_bytes = plan_.regions.weights;  // the slots no longer fit
  expect_broken(Code::kFailedPrecondition, "P7", "past the device");
  plan_.fit_checked = false;  // qbc plan shows plans that do not fit
  QBC_ASSERT_OK(npu::verify_plan(plan_));
}

TEST_F(PlanVerify, P8RegionNotTheSumOfItsBuffers) {
  plan_.regions.kv += plan_.dma_align;
  expect_broken(Code::kFailedPrecondition, "P8", "kv");
}

TEST_F(PlanVerify, P9OnlyKvBuffersGrow) {
  const size_t k = buffer(".kcache");
  plan_.buffers[k].grows = false;
  expect_broken(Code::kFailedPrecondition, "P9", plan_.buffers[k].name);
  plan_.buffers[k].grows = true;
  const size_t act = buffer("act");
  plan_.buffers[act].grows = true;
  expect_broken(Code::kFailedPrecondition, "P9", "'act'");
}

TEST_F(PlanVerify, P10OnlyGrowingBuffersDependOnTheCache) {
  // The programs without the verifiers (check-context ran P10 on the base plan already).
  const StatusOr<Plan> longer = compiled_plan(1024, "npu-programs");
  QBC_ASSERT_OK(longer);
  QBC_ASSERT_OK(npu::verify_plan(*longer));
  QBC_ASSERT_OK(npu::verify_plan_context(plan_, *longer));  // KV grew, nothing else
  Plan bad = *longer;
  bad.stages[0].used += 16;
  Status s = npu::verify_plan_context(plan_, bad);
  EXPECT_EQ(s.message().rfind("P10 (", 0), 0u) << s.message();
  EXPECT_TRUE(contains(s.message(), bad.stages[0].name)) << s.message();
  bad = *longer;
  const size_t act = buffer("act");
  bad.buffers[act].bytes += plan_.dma_align;
  s = npu::verify_plan_context(plan_, bad);
  EXPECT_EQ(s.message().rfind("P10 (", 0), 0u) << s.message();
  EXPECT_TRUE(contains(s.message(), "'act'")) << s.message();
}

TEST_F(PlanVerify, PrinterWritesEveryFieldTheSameWayEveryTime) {
  const std::string text = npu::print_plan(plan_);
  EXPECT_EQ(text, npu::print_plan(Plan(plan_)));
  for (const npu::NodePlan& n : plan_.nodes)
    EXPECT_TRUE(contains(text, " " + n.name + " ")) << n.name;
  EXPECT_TRUE(contains(text, "kcache: kv at")) << text;
  EXPECT_TRUE(contains(text, ", grows (capacity the cache)")) << text;
  // A change to any one field shows in the text.
  const auto differs = [&](auto&& edit) {
    Plan p = plan_;
    edit(p);
    return npu::print_plan(p) != text;
  };
  EXPECT_TRUE(differs([](Plan& p) { p.stages.back().used += 1; }));
  EXPECT_TRUE(differs([](Plan& p) { p.buffers.back().block += 1; }));
  EXPECT_TRUE(differs([](Plan& p) { p.nodes.back().last_use += 1; }));
  EXPECT_TRUE(differs([&](Plan& p) {
    for (npu::NodePlan& n : p.nodes) {
      if (n.kind == NodeKind::kLinear) n.linear.b_off.back() += 1;
    }
  }));
  EXPECT_TRUE(differs([](Plan& p) { p.regions.reserve += 1; }));
}

TEST(PlanTiles, ARowTileThatDoesNotFitIsRefusedBeforeLowering) {
  // P4 holds by construction: a row-wise stage whose one row does not fit SRAM is exit 4
  // from plan-tiles (rms_norm of width 576: its fp32 weight and one row in and out).
  QBC_REQUIRE_SHARED(cfg, "model-configs/SmolLM2-135M-Instruct/config.json");
  StatusOr<testing::Case> c = testing::small_case();
  QBC_ASSERT_OK(c);
  c->options.target.sram_bytes = 4096;
  const Status s = npu::run_pipeline("npu-fit", c->graph, c->options, nullptr).status();
  EXPECT_EQ(s.code(), Code::kResourceExhausted) << s.message();
  EXPECT_TRUE(contains(s.message(), "blk.0.attn_norm")) << s.message();
  EXPECT_TRUE(contains(s.message(), "one row tile needs 4608 bytes")) << s.message();
}

}  // namespace
}  // namespace qbc
