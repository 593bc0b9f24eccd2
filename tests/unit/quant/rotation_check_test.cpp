// spinR1 policy ifBetter (src/quant/rotation_check.cpp): the check measures the
// round-to-nearest output error of the linears normConv + spinR1 change, as is and
// rotated, and the gated passes run only when rotating lowers it. Engineered weights
// force each verdict (weights already on the quantization grid: rotating can only add
// error; outlier input columns: rotating spreads them); a skipped rotation leaves every
// weight bit-identical and a kept one gives exactly what policy always gives.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "qbc/ir/text.h"
#include "qbc/quant/pipeline.h"
#include "qbc/quant/quantize.h"
#include "qbc/quant/transforms.h"
#include "test_support.h"
#include "transform_cases.h"
#include "weight_pass_fixture.h"

namespace qbc::quant {
namespace {

using ::qbc::testing::four_bit_options;
using ::qbc::testing::setup_weight_pass_run;
using ::qbc::testing::TransformCase;
using ::qbc::testing::WeightPassRun;

const TransformCase& llama_case() {
  return ::qbc::testing::find_transform_case("llama32_gqa_tied");
}

std::vector<std::vector<int32_t>> calib_ids(int64_t vocab) {
  std::vector<std::vector<int32_t>> out;
  for (int s = 0; s < 6; ++s) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 40; ++i)
      ids.push_back(static_cast<int32_t>((3 + 53 * s + 17 * i + i * i) % vocab));
    out.push_back(std::move(ids));
  }
  return out;
}

/// The body linears (q/k/v/o/gate/up/down) of the graph.
std::vector<const ir::Node*> body_linears(const ir::Graph& g) {
  std::vector<const ir::Node*> out;
  for (const ir::Node& n : g.nodes()) {
    if (n.op == ir::Op::kLinear && n.part == ir::Part::kBody) out.push_back(&n);
  }
  return out;
}

/// Every weight of the run, by name.
std::map<std::string, std::vector<float>> all_weights(WeightPassRun& r) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, w] : r.model.graph.weights()) {
    std::vector<float> d;
    EXPECT_TRUE(r.store->read(w, &d).ok()) << name;
    out[name] = std::move(d);
  }
  return out;
}

/// Rewrites every body linear's weight with `fill(rows, cols, rng)`.
template <typename F>
void rewrite_linears(WeightPassRun& r, F fill) {
  std::mt19937 rng(7);
  for (const ir::Node* n : body_linears(r.model.graph)) {
    const ir::Weight* w = r.model.graph.find_weight(n->operands[1].weight);
    ASSERT_NE(w, nullptr);
    rewrite_weight(r.ctx, w->name, fill(w->type.dims[0], w->type.dims[1], rng));
  }
}

/// Runs the passes policy ifBetter makes (check, gated normConv, gated spinR1) through
/// the pass manager; returns the verdict.
StatusOr<RotationGate> run_gated(WeightPassRun& r, uint64_t seed) {
  std::vector<std::unique_ptr<Pass>> passes;
  passes.push_back(make_rotation_check(seed));
  passes.push_back(gate_on_rotation(make_norm_conv()));
  passes.push_back(gate_on_rotation(make_spin_r1(seed)));
  QBC_RETURN_IF_ERROR(run_passes(passes, r.ctx));
  return r.ctx.rotation;
}

config::CompileOptions options_4bit_per_row() {
  config::CompileOptions o = four_bit_options();
  o.mutable_bit()->set_weight_group_size(0);
  o.mutable_bit()->set_weight_zero_point(false);
  return o;
}

// Weights already on the 4-bit per-row grid have no round-to-nearest error; the rotated
// ones do, so the check must skip, and nothing may change.
TEST(RotationCheck, GridWeightsSkipTheRotationAndChangeNothing) {
  QBC_REQUIRE_FAMILY_CONFIG("model-configs/Llama-3.2-1B-Instruct/config.json");
  WeightPassRun r;
  const auto ids = calib_ids(256);
  QBC_ASSERT_OK(setup_weight_pass_run(r, llama_case(), ::qbc::testing::shared_dir(), ids,
                                      options_4bit_per_row()));
  rewrite_linears(r, [](int64_t rows, int64_t cols, std::mt19937& rng) {
    std::uniform_int_distribution<int> code(-7, 7);
    std::vector<float> v(static_cast<size_t>(rows * cols));
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j)
        v[i * cols + j] = 0.01f * static_cast<float>(j == 0 ? 7 : code(rng));
    }
    return v;
  });
  const auto before = all_weights(r);
  auto gate = run_gated(r, 3);
  QBC_ASSERT_OK(gate);
  const RotationGate& verdict = *gate;
  EXPECT_TRUE(verdict.decided);
  EXPECT_EQ(verdict.linears, static_cast<int64_t>(body_linears(r.model.graph).size()));
  EXPECT_EQ(verdict.plain, 0.0);
  EXPECT_GT(verdict.rotated, 0.0);
  EXPECT_FALSE(verdict.rotate);
  EXPECT_TRUE(all_weights(r) == before) << "a skipped rotation changed a weight";
}

// Inputs whose few columns carry most of each weight row: per-row scales are set by the
// outliers and the rest round to coarse steps; the rotation spreads them, so it is kept,
// and the result is exactly what normConv + spinR1 give unconditionally.
TEST(RotationCheck, OutlierColumnsKeepTheRotationAsPolicyAlwaysWould) {
  QBC_REQUIRE_FAMILY_CONFIG("model-configs/Llama-3.2-1B-Instruct/config.json");
  auto outliers = [](int64_t rows, int64_t cols, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> v(static_cast<size_t>(rows * cols));
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j)
        v[i * cols + j] = normal(rng) * (j % 16 == 3 ? 40.0f : 1.0f);
    }
    return v;
  };
  const auto ids = calib_ids(256);
  WeightPassRun gated, always;
  QBC_ASSERT_OK(setup_weight_pass_run(gated, llama_case(), ::qbc::testing::shared_dir(), ids,
                                      options_4bit_per_row()));
  QBC_ASSERT_OK(setup_weight_pass_run(always, llama_case(), ::qbc::testing::shared_dir(), ids,
                                      options_4bit_per_row()));
  rewrite_linears(gated, outliers);
  rewrite_linears(always, outliers);
  auto gate = run_gated(gated, 3);
  QBC_ASSERT_OK(gate);
  EXPECT_TRUE(gate->decided);
  EXPECT_LT(gate->rotated, 0.8 * gate->plain);
  EXPECT_TRUE(gate->rotate);

  std::vector<std::unique_ptr<Pass>> direct;
  direct.push_back(make_norm_conv());
  direct.push_back(make_spin_r1(3));
  for (auto& p : direct) QBC_ASSERT_OK(p->run(always.ctx));
  const auto a = all_weights(gated), b = all_weights(always);
  EXPECT_TRUE(a == b) << "ifBetter, when it rotates, differs from policy always";
}

// What the check and the passes it gates need is declared, and the pass manager refuses
// a pipeline that does not provide it, before any pass runs.
TEST(RotationCheck, NeedsSamplesAndGatedPassesNeedTheCheck) {
  QBC_REQUIRE_FAMILY_CONFIG("model-configs/Llama-3.2-1B-Instruct/config.json");
  WeightPassRun r;
  QBC_ASSERT_OK(setup_weight_pass_run(r, llama_case(), ::qbc::testing::shared_dir(), calib_ids(256),
                                      options_4bit_per_row()));
  const std::string before = ir::print_text(r.model.graph);
  std::vector<std::unique_ptr<Pass>> alone;
  alone.push_back(gate_on_rotation(make_spin_r1(0)));
  EXPECT_EQ(alone[0]->name(), "spinR1");
  Status early = run_passes(alone, r.ctx);
  ASSERT_FALSE(early.ok());
  EXPECT_EQ(early.code(), Code::kFailedPrecondition);
  EXPECT_TRUE(
      ::qbc::testing::contains(early.message(), "pass spinR1 needs the spinR1 check's verdict"))
      << early.message();
  EXPECT_EQ(ir::print_text(*r.ctx.graph), before) << "a refused pipeline ran a pass";

  r.ctx.samples = nullptr;
  r.ctx.num_samples = 0;
  std::vector<std::unique_ptr<Pass>> check;
  check.push_back(make_rotation_check(0));
  check.push_back(gate_on_rotation(make_spin_r1(0)));
  Status no_samples = run_passes(check, r.ctx);
  ASSERT_FALSE(no_samples.ok());
  EXPECT_TRUE(
      ::qbc::testing::contains(no_samples.message(), "pass spinR1Check needs calibration samples"))
      << no_samples.message();
}

// The pipeline the policy builds: `always` runs normConv and spinR1 unconditionally,
// ifBetter puts the check first and gates both on it.
TEST(RotationCheck, PolicyBuildsTheGatedPipeline) {
  config::CompileOptions o = config::defaults();
  auto* et = o.mutable_equivalent_transformation();
  et->mutable_norm_conv()->set_apply(true);
  et->mutable_spin_r1()->set_apply(true);
  auto names = [](const std::vector<pass::PipelineEntry>& entries) {
    std::vector<std::string> out;
    for (const pass::PipelineEntry& e : entries) {
      if (e.pass != "calibrate" && e.pass != "quantizeRtn") out.push_back(e.pass);
    }
    return out;
  };
  StatusOr<std::vector<pass::PipelineEntry>> always = quant_pipeline(o);
  QBC_ASSERT_OK(always);
  EXPECT_EQ(names(*always), (std::vector<std::string>{"normConv", "spinR1"}));
  et->mutable_spin_r1()->set_policy(config::ROTATION_POLICY_IF_BETTER);
  StatusOr<std::vector<pass::PipelineEntry>> checked = quant_pipeline(o);
  QBC_ASSERT_OK(checked);
  EXPECT_EQ(names(*checked), (std::vector<std::string>{"spinR1Check", "normConv", "spinR1"}));
  StatusOr<pass::PassManager<PassContext>> pm = build_pipeline(*checked, o, {});
  QBC_ASSERT_OK(pm);
  EXPECT_EQ(pm->passes()[1]->needs() & kRotationVerdict, kRotationVerdict)
      << "normConv is not gated";
  EXPECT_EQ(pm->passes()[2]->needs() & kRotationVerdict, kRotationVerdict) << "spinR1 is not gated";
}

}  // namespace
}  // namespace qbc::quant
