// A vision attention block with host rope tables as an NPU program (docs/npu.md "Feature
// bundles"): x, rope_cos and rope_sin are three feature inputs; q, k and v linears, rope_table
// on q and k, full_attention over all rows, and an fp32 head linear. Quantized with the
// vision recipe (quant::quantize_vision), compiled, run in the executor: the rows equal the
// fake-quant evaluator's bit for bit over single, global8 and a small SRAM, and the tables
// matter (other angles give other rows).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/ir/builder.h"
#include "qbc/npu/compile.h"
#include "qbc/quant/fakequant.h"
#include "qbc/quant/vision_quant.h"
#include "qbc/runtime/feature_session.h"
#include "small_case.h"
#include "test_support.h"

namespace qbc {
namespace {

using ir::DType;
using ir::TensorType;

constexpr int64_t kRows = 150, kWidth = 32, kHeads = 4, kDim = 8, kOut = 24;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

/// The block's graph: inputs x, rope_cos, rope_sin; output `image_features` (fp32, head).
ir::Graph block_graph(const std::vector<int64_t>& segments) {
  ir::Graph g("vision_rope_block");
  ir::Builder b(g);
  const ir::ValueId x = *b.input("x", TensorType{DType::kF32, {1, kRows, kWidth}});
  const ir::ValueId cs = *b.input("rope_cos", TensorType{DType::kF32, {1, kRows, kDim / 2}});
  const ir::ValueId sn = *b.input("rope_sin", TensorType{DType::kF32, {1, kRows, kDim / 2}});
  auto linear = [&](const std::string& name, ir::ValueId in, int64_t out, int64_t k) {
    b.weight(name + ".weight", TensorType{DType::kF32, {out, k}}, name + ".weight");
    b.weight(name + ".bias", TensorType{DType::kF32, {out}}, name + ".bias");
    return *b.linear(name, in, name + ".weight", name + ".bias", name);
  };
  b.set_block(0);
  const ir::ValueId q = linear("blk.q", x, kWidth, kWidth);
  const ir::ValueId k = linear("blk.k", x, kWidth, kWidth);
  const ir::ValueId v = linear("blk.v", x, kWidth, kWidth);
  const ir::ValueId qr = *b.rope_table("blk.q_rope", q, cs, sn, kHeads, kDim, "rope");
  const ir::ValueId kr = *b.rope_table("blk.k_rope", k, cs, sn, kHeads, kDim, "rope");
  const ir::ValueId a =
      *b.full_attention("blk.attention", qr, kr, v, kHeads, kDim,
                        1.0 / std::sqrt(static_cast<double>(kDim)), segments, "attn");
  const ir::ValueId y = *b.add("blk.residual", a, x, "add");
  b.set_block(-1);
  b.set_part(ir::Part::kHead);
  g.add_output(linear("image_features", y, kOut, kWidth));
  return g;
}

/// Random weights, deterministic per tensor name.
Status read_weight(const ir::Weight& w, std::vector<float>* v) {
  std::mt19937 gen(static_cast<uint32_t>(std::hash<std::string>{}(w.tensor)));
  std::normal_distribution<float> n(0.0f, 0.2f);
  v->resize(static_cast<size_t>(w.type.num_elements()));
  for (float& x : *v) x = n(gen);
  return ok_status();
}

/// Inputs: random x; the tables of positions 0.. at frequencies theta^(-2i/d), shifted by
/// `phase` (another image layout gives other angles).
quant::FeatureSample inputs(uint32_t seed, double phase) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.5f, 1.5f);
  std::vector<float> x(static_cast<size_t>(kRows * kWidth)), c, s;
  for (float& e : x) e = u(gen);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t i = 0; i < kDim / 2; ++i) {
      const double angle = (static_cast<double>(r % 13) + phase) * std::pow(100.0, -2.0 * i / kDim);
      c.push_back(static_cast<float>(std::cos(angle)));
      s.push_back(static_cast<float>(std::sin(angle)));
    }
  }
  return {x, c, s};
}

struct BlockCase {
  const char* name;
  std::vector<int64_t> segments;  ///< full_attention's windows (empty: all rows)
};

class VisionRope : public ::testing::TestWithParam<BlockCase> {};

TEST_P(VisionRope, FeatureInputTablesGiveTheFakeQuantRowsBitForBit) {
  const ir::Graph g = block_graph(GetParam().segments);
  config::CompileOptions o = config::defaults();
  auto q = quant::quantize_vision(g, read_weight, {inputs(1, 0.0), inputs(2, 0.0)}, o);
  QBC_ASSERT_OK(q);
  auto qr = std::make_shared<const quant::QuantizeResult>(std::move(*q));
  const ir::WeightReader reader = quant::with_sidecar(read_weight, *qr);
  auto fq = quant::FakeQuantSession::create(qr->graph, reader);
  QBC_ASSERT_OK(fq);
  const quant::FeatureSample image = inputs(3, 0.0), turned = inputs(3, 0.5);
  std::vector<float> want, want_turned;
  QBC_ASSERT_OK((*fq)->forward_inputs(image, &want));
  QBC_ASSERT_OK((*fq)->forward_inputs(turned, &want_turned));
  ASSERT_EQ(want.size(), static_cast<size_t>(kRows * kOut));
  EXPECT_FALSE(same_bits(want, want_turned));  // the tables matter
  struct Deployment {
    int64_t sram;
    isa::Scheme scheme;
    int cores;
  };
  for (const Deployment& d :
       {Deployment{0, isa::Scheme::kSingle, 1}, Deployment{0, isa::Scheme::kGlobal8, 8},
        Deployment{32 * 1024, isa::Scheme::kGlobal8, 8}}) {
    const std::string at =
        std::string(isa::scheme_name(d.scheme)) + ", SRAM " + std::to_string(d.sram);
    auto t = testing::test_target("aries-rb");
    QBC_ASSERT_OK(t);
    npu::Options opt;
    opt.target = *t;
    if (d.sram > 0) opt.target.sram_bytes = d.sram;
    opt.modes = {npu::ModeRequest{d.scheme, d.cores, 1}};
    opt.chunk = opt.max_cache = kRows;
    auto b = npu::compile(qr->graph, reader, opt);
    ASSERT_TRUE(b.ok()) << at << ": " << b.status().to_string();
    ASSERT_EQ(b->feature_inputs.size(), 3u);
    EXPECT_EQ(b->feature_inputs[1].name, "rope_cos");
    EXPECT_FALSE(b->rope_inputs.present()) << at;  // feature inputs, not decoder tables
    runtime::DeviceOptions dopt;
    dopt.scheme = d.scheme;
    auto s =
        runtime::FeatureSession::create(std::make_shared<const isa::Bundle>(std::move(*b)), dopt);
    ASSERT_TRUE(s.ok()) << at << ": " << s.status().to_string();
    std::vector<float> got;
    QBC_ASSERT_OK((*s)->forward(image, &got));
    EXPECT_TRUE(same_bits(got, want)) << at;
    QBC_ASSERT_OK((*s)->forward(turned, &got));
    EXPECT_TRUE(same_bits(got, want_turned)) << at << " (turned tables)";
  }
}

// Window attention (Qwen2.5-VL's windowed blocks): segments as key ranges, with boundaries
// inside query row tiles and key chunks, and one segment of all rows.
INSTANTIATE_TEST_SUITE_P(
    Cases, VisionRope,
    ::testing::Values(BlockCase{"full", {}}, BlockCase{"windows_40", {40, 40, 40, 30}},
                      BlockCase{"windows_uneven", {37, 50, 63}}, BlockCase{"one_window", {150}}),
    [](const ::testing::TestParamInfo<BlockCase>& i) { return std::string(i.param.name); });

// Windows change the rows: the same block without them gives other features.
TEST(VisionRopeWindows, SegmentsChangeTheFakeQuantRows) {
  std::vector<float> rows[2];
  const std::vector<int64_t> segs[2] = {{}, {40, 40, 40, 30}};
  for (int i = 0; i < 2; ++i) {
    const ir::Graph g = block_graph(segs[i]);
    auto fq = quant::FakeQuantSession::create(g, read_weight);
    QBC_ASSERT_OK(fq);
    QBC_ASSERT_OK((*fq)->forward_inputs(inputs(3, 0.0), &rows[i]));
  }
  EXPECT_FALSE(same_bits(rows[0], rows[1]));
}

}  // namespace
}  // namespace qbc
