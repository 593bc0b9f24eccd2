// normConv leaves the float logits unchanged on every family, folds exactly the norms
// that only feed linears, and its rewritten weights survive quantize's sidecar.
#include <gtest/gtest.h>

#include "qbc/ir/verifier.h"
#include "qbc/quant/pass.h"
#include "qbc/quant/transforms.h"
#include "qbc/quant/weight_store.h"
#include "transform_cases.h"

namespace qbc::quant {
namespace {

using ::qbc::testing::TransformCase;

class NormConvFamilies : public ::testing::TestWithParam<TransformCase> {};

TEST_P(NormConvFamilies, LogitsUnchangedAndGainsFolded) {
  const TransformCase& c = GetParam();
  QBC_REQUIRE_TRANSFORM_CASE(shared, c);
  auto m = ::qbc::testing::load_transform_case(c, shared);
  QBC_ASSERT_OK(m);
  const ir::WeightReader source = frontend::model_weight_reader(*m->source);
  const std::vector<int32_t> ids = ::qbc::testing::transform_test_ids(m->vocab);
  auto before = ::qbc::testing::float_logits(m->graph, source, ids);
  QBC_ASSERT_OK(before);

  WeightStore store(source);
  ir::Graph g = m->graph;
  PassContext ctx;
  ctx.graph = &g;
  ctx.weights = &store;
  std::vector<std::unique_ptr<Pass>> passes;
  passes.push_back(make_norm_conv());
  std::vector<PassRecord> records;
  QBC_ASSERT_OK(run_passes(passes, ctx, &records));
  ASSERT_EQ(records.size(), 1u);
  EXPECT_TRUE(records[0].changed);
  auto after = ::qbc::testing::float_logits(g, store.reader(), ids);
  QBC_ASSERT_OK(after);
  const double err = ::qbc::testing::max_relative_error(*before, *after);
  std::printf("[normConv] %s: max relative logit error %.3g\n", c.name.c_str(), err);
  EXPECT_LE(err, 1e-4);

  // Folded norms have unit gain; norms feeding anything but linears keep theirs.
  const auto nodes = g.nodes();
  for (const ir::Node& n : nodes) {
    // LayerNorm (Cohere2) folds its gain the same way: the mean subtraction comes before it.
    if (n.op != ir::Op::kRmsNorm && n.op != ir::Op::kLayerNorm) continue;
    const bool qk_or_post = n.name.find("q_norm") != std::string::npos ||
                            n.name.find("k_norm") != std::string::npos ||
                            n.name.find("post_norm") != std::string::npos;
    EXPECT_EQ(store.rewritten(n.operands[1].weight), !qk_or_post) << n.name;
    if (qk_or_post) continue;
    std::vector<float> w;
    QBC_ASSERT_OK(store.read(*g.find_weight(n.operands[1].weight), &w));
    for (float v : w)
      ASSERT_EQ(v + static_cast<float>(n.attrs.get_int("unit_offset", 0)), 1.0f) << n.name;
  }
  // A second run has nothing left to fold.
  records.clear();
  QBC_ASSERT_OK(run_passes(passes, ctx, &records));
  EXPECT_FALSE(records[0].changed);
}

INSTANTIATE_TEST_SUITE_P(All, NormConvFamilies,
                         ::testing::ValuesIn(::qbc::testing::transform_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(NormConv, TiedHeadIsUntiedNotTheHostEmbedding) {
  QBC_REQUIRE_SHARED(shared, "");
  QBC_REQUIRE_SHARED(dir, "models/stories260k/hf-tied");
  auto m = ::qbc::testing::load_transform_case(
      {"tied", "models/stories260k/hf-tied", "", "", "", ""}, shared);
  QBC_ASSERT_OK(m);
  WeightStore store(frontend::model_weight_reader(*m->source));
  ir::Graph g = m->graph;
  PassContext ctx;
  ctx.graph = &g;
  ctx.weights = &store;
  std::vector<std::unique_ptr<Pass>> passes;
  passes.push_back(make_norm_conv());
  QBC_ASSERT_OK(run_passes(passes, ctx));
  // The head (same tensor as the embedding in the file) absorbed the final norm; the
  // host embedding table did not.
  EXPECT_TRUE(store.rewritten("head.lm_head.weight"));
  EXPECT_FALSE(store.rewritten("token_embd.weight"));
}

}  // namespace
}  // namespace qbc::quant
