// The quant stage on the pass framework: a pass that breaks the graph is an internal
// error (exit 70) naming the pass and the broken invariant; the pipeline is data built
// from the configuration; --disable-pass names are checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/ir/builder.h"
#include "qbc/ir/verifier.h"
#include "qbc/quant/pipeline.h"
#include "qbc/support/exit_codes.h"
#include "test_support.h"

namespace qbc::quant {
namespace {

ir::TensorType f32(std::vector<int64_t> d) { return ir::TensorType{ir::DType::kF32, std::move(d)}; }

ir::Graph tiny_graph() {
  ir::Graph g("tiny");
  ir::Builder b(g);
  b.weight("fc.weight", f32({8, 8}), "fc.weight");
  const ir::ValueId x = *b.input("x", f32({ir::kDynamic, ir::kDynamic, 8}));
  b.set_block(0);
  const ir::ValueId y = *b.linear("blk.0.fc", x, "fc.weight", "", "fc");
  g.add_output(y);
  return g;
}

/// Points the linear at a weight that does not exist.
class DanglingWeight final : public Pass {
 public:
  std::string name() const override { return "danglingWeight"; }
  StatusOr<bool> run(PassContext& ctx) override {
    ctx.graph->mutable_node(ctx.graph->find("blk.0.fc")).operands[1] =
        ir::Operand::of_weight("no.such.weight");
    return true;
  }
};

TEST(QuantPasses, APassThatBreaksTheGraphIsAnInternalErrorNamingPassAndInvariant) {
  ir::Graph g = tiny_graph();
  QBC_ASSERT_OK(ir::verify(g));
  WeightStore store([](const ir::Weight& w, std::vector<float>* out) {
    out->assign(static_cast<size_t>(w.type.num_elements()), 0.0f);
    return ok_status();
  });
  const config::CompileOptions options = config::defaults();
  PassContext ctx;
  ctx.graph = &g;
  ctx.weights = &store;
  ctx.options = &options;
  std::vector<std::unique_ptr<Pass>> passes;
  passes.push_back(std::make_unique<DanglingWeight>());
  const Status s = run_passes(passes, ctx);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Code::kInternal);
  EXPECT_EQ(exit_code_for(s), kExitInternal);
  EXPECT_TRUE(testing::contains(s.message(), "pass danglingWeight broke an invariant"))
      << s.message();
  // The verifier's own message, naming the node and the missing weight.
  EXPECT_TRUE(testing::contains(s.message(), "blk.0.fc")) << s.message();
  EXPECT_TRUE(testing::contains(s.message(), "no.such.weight")) << s.message();
}

std::vector<std::string> names(const std::vector<pass::PipelineEntry>& entries) {
  std::vector<std::string> out;
  for (const pass::PipelineEntry& e : entries) out.push_back(e.pass);
  return out;
}

TEST(QuantPipeline, FollowsTheConfigurationAndEndsWithTheFixedStages) {
  config::CompileOptions o = config::defaults();
  auto plain = quant_pipeline(o);
  QBC_ASSERT_OK(plain);
  const std::vector<std::string> fixed = {"calibrate", "quantizeRtn"};
  std::vector<std::string> got = names(*plain);
  ASSERT_GE(got.size(), 2u);
  EXPECT_EQ(std::vector<std::string>(got.end() - 2, got.end()), fixed);

  auto* et = o.mutable_equivalent_transformation();
  et->mutable_spin_r2()->set_apply(true);
  et->mutable_vo()->set_apply(true);
  o.mutable_hessian_quant()->set_apply(true);
  auto more = quant_pipeline(o);
  QBC_ASSERT_OK(more);
  got = names(*more);
  auto pos = [&](const std::string& n) {
    return std::find(got.begin(), got.end(), n) - got.begin();
  };
  ASSERT_LT(pos("spinR2"), static_cast<long>(got.size()));
  EXPECT_LT(pos("spinR2"), pos("calibrateScales"));
  EXPECT_LT(pos("calibrateScales"), pos("vo"));
  EXPECT_LT(pos("vo"), pos("hessianQuant"));
  EXPECT_LT(pos("hessianQuant"), pos("calibrate"));
  for (const pass::PipelineEntry& e : *more) {
    EXPECT_FALSE(e.enabled_by.empty()) << e.pass;
    EXPECT_FALSE(e.why.empty()) << e.pass;
    EXPECT_TRUE(quant_passes().contains(e.pass)) << e.pass;
  }
  // Every registered pass can be built from the defaults.
  for (const std::string& n : quant_passes().names()) QBC_ASSERT_OK(quant_passes().create(n, o));

  et->mutable_spin_r1()->set_apply(true);
  et->mutable_norm_conv()->set_apply(false);
  auto refused = quant_pipeline(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(testing::contains(refused.status().message(), "spinR1 needs normConv"));
}

TEST(QuantPipeline, DisablePassNamesAreChecked) {
  const auto pipeline = quant_pipeline(config::defaults());
  QBC_ASSERT_OK(pipeline);
  const std::vector<pass::PipelineEntry>& entries = *pipeline;
  QBC_ASSERT_OK(check_disabled(entries, {"spinR2"}));  // registered, only not enabled: a warning
  const Status unknown = check_disabled(entries, {"spinR3"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(exit_code_for(unknown), kExitBadInput);
  EXPECT_TRUE(testing::contains(unknown.message(), "--disable-pass spinR3: no such pass"))
      << unknown.message();
  pass::Instrumentation dump;
  dump.dump_after = {"calibrate", "all"};
  QBC_ASSERT_OK(check_instrumentation(entries, dump));
  dump.dump_after = {"spinR2"};  // registered, but not in this pipeline: nothing would be dumped
  const Status no_dump = check_instrumentation(entries, dump);
  ASSERT_FALSE(no_dump.ok());
  EXPECT_TRUE(
      testing::contains(no_dump.message(), "--dump-after spinR2: not a pass of this pipeline"))
      << no_dump.message();
  const Status fixed = check_disabled(entries, {"quantizeRtn"});
  ASSERT_FALSE(fixed.ok());
  EXPECT_TRUE(testing::contains(fixed.message(), "cannot be disabled")) << fixed.message();
  // bit.prefill / bit.decode's second images are rounded only there, before GPTQ.
  const Status phase = check_disabled(entries, {"phaseImages"});
  ASSERT_FALSE(phase.ok());
  EXPECT_TRUE(testing::contains(phase.message(), "--disable-pass phaseImages")) << phase.message();
}

}  // namespace
}  // namespace qbc::quant
