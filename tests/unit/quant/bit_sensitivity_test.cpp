// The sensitivity bits by budget chooses from (src/quant/bit_sensitivity.cpp): every
// decoder-block linear is measured, in graph order, by the error its 4-bit weights cause at its
// block's output on calibration samples. On the trained stories260K every linear's error is
// positive and a small fraction of the stream; a linear whose weights sit on the 4-bit grid
// causes none (so it is the first to go to 4 bits); the result does not depend on the thread
// count.
#include "qbc/quant/bit_sensitivity.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "test_support.h"
#include "transform_cases.h"
#include "weight_pass_fixture.h"

namespace qbc::quant {
namespace {

using ::qbc::testing::setup_weight_pass_run;
using ::qbc::testing::WeightPassRun;

std::vector<std::vector<int32_t>> calib_ids(int64_t vocab) {
  std::vector<std::vector<int32_t>> out;
  for (int s = 0; s < 6; ++s) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 48; ++i)
      ids.push_back(static_cast<int32_t>((5 + 41 * s + 13 * i + i * i) % vocab));
    out.push_back(std::move(ids));
  }
  return out;
}

/// Per-row symmetric codes without groups: a row whose largest weight is +7 steps is exact at
/// 4 bits.
config::CompileOptions per_row_options() {
  config::CompileOptions o = config::defaults();
  o.mutable_bit()->set_weight_group_size(0);
  o.mutable_bit()->set_weight_zero_point(false);
  o.mutable_hessian_quant()->set_apply(false);
  return o;
}

Status setup(WeightPassRun& r, const config::CompileOptions& options) {
  const auto& c = ::qbc::testing::find_transform_case("stories260k");
  return setup_weight_pass_run(r, c, ::qbc::testing::shared_dir(), calib_ids(512), options);
}

/// The block linears of the graph, in graph order.
std::vector<std::string> block_linears(const ir::Graph& g) {
  std::vector<std::string> out;
  for (const ir::Node& n : g.nodes())
    if (n.op == ir::Op::kLinear && n.part == ir::Part::kBody) out.push_back(n.name);
  return out;
}

TEST(BitSensitivity, EveryBlockLinearInGraphOrderWithAPositiveBlockError) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  WeightPassRun r;
  ASSERT_TRUE(setup(r, per_row_options()).ok());
  auto e = linear_bit_errors(r.model.graph, *r.store, r.samples, r.embeds.size(), r.options);
  ASSERT_TRUE(e.ok()) << e.status().message();
  const std::vector<std::string> want = block_linears(r.model.graph);
  ASSERT_EQ(e->size(), want.size());
  ASSERT_EQ(want.size(), 5u * 7u);  // 5 blocks of q, k, v, o, gate, up, down
  for (size_t i = 0; i < want.size(); ++i) {
    const LinearBitError& x = (*e)[i];
    EXPECT_EQ(x.node, want[i]);
    EXPECT_GT(x.rows, 0);
    EXPECT_GT(x.cols, 0);
    EXPECT_GT(x.e4, 1e-6) << x.node;
    EXPECT_LT(x.e4, 0.05) << x.node;  // one linear at 4 bits, relative to the whole stream
  }
}

TEST(BitSensitivity, WeightsOnTheFourBitGridLoseNothingAtFourBits) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  WeightPassRun r;
  ASSERT_TRUE(setup(r, per_row_options()).ok());
  const std::string target = "blk.2.ffn.up_proj";
  const ir::ValueId id = r.model.graph.find(target);
  ASSERT_GE(id, 0);
  const ir::Node* n = &r.model.graph.node(id);
  const ir::Weight* w = r.model.graph.find_weight(n->operands[1].weight);
  ASSERT_NE(w, nullptr);
  const int64_t rows = w->type.dims[0], cols = w->type.dims[1];
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> code(-7, 7);
  std::vector<float> grid(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    const float step = 0.01f * static_cast<float>(1 + i % 5);
    for (int64_t c = 0; c < cols; ++c)
      grid[i * cols + c] = step * static_cast<float>(c == 0 ? 7 : code(rng));
  }
  rewrite_weight(r.ctx, w->name, grid);
  auto e = linear_bit_errors(r.model.graph, *r.store, r.samples, r.embeds.size(), r.options);
  ASSERT_TRUE(e.ok()) << e.status().message();
  double lowest = 1e300;
  std::string lowest_node;
  for (const LinearBitError& x : *e) {
    if (x.density() < lowest) {
      lowest = x.density();
      lowest_node = x.node;
    }
    if (x.node != target) continue;
    EXPECT_LT(x.e4, 1e-12);
  }
  EXPECT_EQ(lowest_node, target);
  EXPECT_LT(lowest, 1e-15);
}

TEST(BitSensitivity, TheSameForOneAndTwoThreads) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  WeightPassRun r;
  config::CompileOptions o = per_row_options();
  o.mutable_bit()->set_weight_group_size(32);
  o.mutable_bit()->set_weight_zero_point(true);
  ASSERT_TRUE(setup(r, o).ok());
  ref::SessionOptions one, two;
  one.threads = 1;
  two.threads = 2;
  auto a = linear_bit_errors(r.model.graph, *r.store, r.samples, r.embeds.size(), r.options, one);
  auto b = linear_bit_errors(r.model.graph, *r.store, r.samples, r.embeds.size(), r.options, two);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  ASSERT_EQ(a->size(), b->size());
  for (size_t i = 0; i < a->size(); ++i) {
    EXPECT_EQ((*a)[i].e4, (*b)[i].e4) << (*a)[i].node;
    EXPECT_EQ((*a)[i].e8, (*b)[i].e8) << (*a)[i].node;
  }
}

TEST(BitSensitivity, NoSamplesIsRefused) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  WeightPassRun r;
  ASSERT_TRUE(setup(r, per_row_options()).ok());
  auto e = linear_bit_errors(r.model.graph, *r.store, r.samples, 0, r.options);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("no calibration samples"), std::string::npos);
}

}  // namespace
}  // namespace qbc::quant
