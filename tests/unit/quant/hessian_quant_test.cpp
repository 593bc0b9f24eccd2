// hessianQuant (GPTQ over a whole model, block by block, true-sequential): on
// stories260K at 4-bit weights it fixes the integers of every linear, the codes are in
// range and match the rewritten float weights, and the GPTQ model is closer to the float
// model than round-to-nearest; it is deterministic; it runs on random models of other
// families (GQA, QK-norms, fused projections, soft-caps).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "qbc/quant/gptq.h"
#include "qbc/quant/weight_passes.h"
#include "qbc/quant/weight_store.h"
#include "qbc/tokenizer/tokenizer.h"
#include "transform_cases.h"
#include "weight_pass_fixture.h"

namespace qbc::quant {
namespace {

using ::qbc::testing::all_logits;
using ::qbc::testing::distance;
using ::qbc::testing::Distance;
using ::qbc::testing::four_bit_options;
using ::qbc::testing::setup_weight_pass_run;
using ::qbc::testing::text_sequences;
using ::qbc::testing::WeightPassRun;

using ::qbc::testing::TransformCase;

config::HessianQuantConfig hq_config() {
  config::HessianQuantConfig c = config::defaults().hessian_quant();
  c.set_apply(true);
  return c;
}

/// Every linear not left in float has fixed integers in range whose dequantization is
/// exactly the rewritten float weight.
void expect_fixed_complete(WeightPassRun& r) {
  const ir::Graph& g = r.model.graph;
  int linears = 0;
  for (const ir::Node& n : g.nodes()) {
    if (n.op != ir::Op::kLinear) continue;
    const LinearBits bits = linear_bits(n.name, n.part == ir::Part::kHead, r.options);
    if (bits.weight == 16) continue;
    ++linears;
    auto it = r.fixed.find(n.name);
    ASSERT_NE(it, r.fixed.end()) << n.name;
    const FixedWeights& f = it->second;
    const ir::Weight* w = g.find_weight(n.operands[1].weight);
    ASSERT_NE(w, nullptr);
    const int64_t rows = w->type.dims[0], cols = w->type.dims[1];
    EXPECT_EQ(f.bits, bits.weight) << n.name;
    ASSERT_EQ(f.codes.size(), static_cast<size_t>(rows * cols)) << n.name;
    ASSERT_EQ(f.scales.size(), static_cast<size_t>(rows)) << n.name;
    const int lo = -(1 << (f.bits - 1)), hi = (1 << (f.bits - 1)) - 1;
    std::vector<float> data;
    QBC_ASSERT_OK(r.store->read(*w, &data));
    ASSERT_EQ(data.size(), f.codes.size());
    int64_t bad = 0, mismatched = 0;
    for (int64_t i = 0; i < rows; ++i) {
      EXPECT_TRUE(std::fabs(f.scales[static_cast<size_t>(i)]) >= 1e-8f &&
                  std::isfinite(f.scales[static_cast<size_t>(i)]));
      for (int64_t j = 0; j < cols; ++j) {
        const int q = f.codes[static_cast<size_t>(i * cols + j)];
        if (q < lo || q > hi) ++bad;
        const int z = f.zeros.empty() ? 0 : f.zeros[static_cast<size_t>(i)];
        if (z < lo || z > hi) ++bad;
        const float deq =
            static_cast<float>(static_cast<double>(f.scales[static_cast<size_t>(i)]) * (q - z));
        if (deq != data[static_cast<size_t>(i * cols + j)]) ++mismatched;
      }
    }
    EXPECT_EQ(bad, 0) << n.name;
    EXPECT_EQ(mismatched, 0) << n.name;
  }
  EXPECT_GT(linears, 0);
  EXPECT_EQ(static_cast<int>(r.fixed.size()), linears);
}

/// Writes round-to-nearest dequantized weights (per output channel, absmax) for every
/// quantized linear of r's graph.
Status apply_rtn(WeightPassRun& r) {
  const ir::Graph g = r.model.graph;
  for (const ir::Node& n : g.nodes()) {
    if (n.op != ir::Op::kLinear) continue;
    const LinearBits bits = linear_bits(n.name, n.part == ir::Part::kHead, r.options);
    if (bits.weight == 16) continue;
    const ir::Weight* w = g.find_weight(n.operands[1].weight);
    std::vector<float> data;
    QBC_RETURN_IF_ERROR(r.store->read(*w, &data));
    GptqOptions o;
    o.bits = bits.weight;
    QBC_ASSIGN_OR_RETURN(GptqResult q, rtn_quantize(data, w->type.dims[0], w->type.dims[1], o));
    rewrite_weight(r.ctx, w->name, dequantize(q));
  }
  return ok_status();
}

TEST(HessianQuant, Stories260kBeatsRoundToNearestAt4Bits) {
  QBC_REQUIRE_SHARED(shared, "");
  QBC_REQUIRE_SHARED(dir, "models/stories260k/hf");
  QBC_REQUIRE_SHARED(calib_txt, "data/tinystories/calib.clean.txt");
  QBC_REQUIRE_SHARED(eval_txt, "data/tinystories/eval.clean.txt");
  auto tok = tokenizer::Tokenizer::from_hf_dir(dir);
  QBC_ASSERT_OK(tok);
  // load_transform_case builds the graph with a 64-token cache.
  const auto calib = text_sequences(*tok, calib_txt, 0, 32, 64);
  const auto held_out = text_sequences(*tok, eval_txt, 0, 12, 64);
  ASSERT_EQ(calib.size(), 32u);
  ASSERT_EQ(held_out.size(), 12u);
  const TransformCase c = ::qbc::testing::transform_cases()[0];
  ASSERT_EQ(c.name, "stories260k");

  WeightPassRun fp, rtn, gptq, ft, zp;
  QBC_ASSERT_OK(setup_weight_pass_run(fp, c, shared, calib, four_bit_options()));
  QBC_ASSERT_OK(setup_weight_pass_run(rtn, c, shared, calib, four_bit_options()));
  QBC_ASSERT_OK(setup_weight_pass_run(gptq, c, shared, calib, four_bit_options()));
  QBC_ASSERT_OK(setup_weight_pass_run(ft, c, shared, calib, four_bit_options()));
  config::CompileOptions zero_opts = four_bit_options();
  zero_opts.mutable_bit()->set_weight_zero_point(true);
  QBC_ASSERT_OK(setup_weight_pass_run(zp, c, shared, calib, zero_opts));

  auto pass = make_hessian_quant(hq_config());
  EXPECT_EQ(pass->name(), "hessianQuant");
  auto changed = pass->run(gptq.ctx);
  QBC_ASSERT_OK(changed);
  EXPECT_TRUE(*changed);
  expect_fixed_complete(gptq);
  // The head stays at its default 8 bits, the blocks at 4.
  for (const auto& [name, f] : gptq.fixed) {
    const bool head = gptq.model.graph.node(gptq.model.graph.find(name)).part == ir::Part::kHead;
    EXPECT_EQ(f.bits, head ? 8 : 4) << name;
  }
  QBC_ASSERT_OK(apply_rtn(rtn));
  config::HessianQuantConfig ft_config = hq_config();
  ft_config.mutable_attributes()->set_float_target(true);
  QBC_ASSERT_OK(make_hessian_quant(ft_config)->run(ft.ctx));
  expect_fixed_complete(ft);
  QBC_ASSERT_OK(make_hessian_quant(hq_config())->run(zp.ctx));
  expect_fixed_complete(zp);
  size_t with_zeros = 0;
  for (const auto& [name, f] : zp.fixed) with_zeros += f.zeros.size() == f.scales.size();
  EXPECT_EQ(with_zeros, zp.fixed.size());

  auto ref_logits = all_logits(fp.model.graph, fp.store->reader(), held_out);
  QBC_ASSERT_OK(ref_logits);
  auto rtn_logits = all_logits(rtn.model.graph, rtn.store->reader(), held_out);
  QBC_ASSERT_OK(rtn_logits);
  auto gptq_logits = all_logits(gptq.model.graph, gptq.store->reader(), held_out);
  QBC_ASSERT_OK(gptq_logits);
  auto ft_logits = all_logits(ft.model.graph, ft.store->reader(), held_out);
  QBC_ASSERT_OK(ft_logits);
  auto zp_logits = all_logits(zp.model.graph, zp.store->reader(), held_out);
  QBC_ASSERT_OK(zp_logits);
  const Distance d_rtn = distance(*ref_logits, *rtn_logits, fp.model.vocab);
  const Distance d_gptq = distance(*ref_logits, *gptq_logits, fp.model.vocab);
  const Distance d_ft = distance(*ref_logits, *ft_logits, fp.model.vocab);
  const Distance d_zp = distance(*ref_logits, *zp_logits, fp.model.vocab);
  std::printf("stories260K W4 held-out: RTN  KL %.6f  MSE %.6f\n", d_rtn.kl, d_rtn.mse);
  std::printf("stories260K W4 held-out: GPTQ KL %.6f  MSE %.6f\n", d_gptq.kl, d_gptq.mse);
  std::printf("stories260K W4 held-out: GPTQ floatTarget KL %.6f  MSE %.6f\n", d_ft.kl, d_ft.mse);
  std::printf("stories260K W4 held-out: GPTQ zero points KL %.6f  MSE %.6f\n", d_zp.kl, d_zp.mse);
  EXPECT_GT(d_rtn.kl, 0.0);
  EXPECT_LT(d_gptq.kl, d_rtn.kl);
  EXPECT_LT(d_gptq.mse, d_rtn.mse);
  EXPECT_LT(d_ft.kl, d_gptq.kl);  // aiming at the float outputs removes the earlier layers' error
  EXPECT_LT(d_zp.kl, d_rtn.kl);
}

TEST(HessianQuant, Deterministic) {
  QBC_REQUIRE_SHARED(shared, "");
  QBC_REQUIRE_SHARED(dir, "models/stories260k/hf");
  const TransformCase c = ::qbc::testing::transform_cases()[0];
  std::vector<std::vector<int32_t>> calib;
  for (size_t i = 0; i < 4; ++i) {
    std::vector<int32_t> ids = ::qbc::testing::transform_test_ids(512, 20 + 9 * i);
    for (int32_t& id : ids) id = static_cast<int32_t>((id + 29 * i) % 512);
    calib.push_back(ids);
  }
  config::HessianQuantConfig hc = hq_config();
  hc.mutable_attributes()->set_block_size(16);  // several lazy-update blocks per row
  WeightPassRun a, b;
  QBC_ASSERT_OK(setup_weight_pass_run(a, c, shared, calib, four_bit_options()));
  QBC_ASSERT_OK(setup_weight_pass_run(b, c, shared, calib, four_bit_options()));
  QBC_ASSERT_OK(make_hessian_quant(hc)->run(a.ctx));
  QBC_ASSERT_OK(make_hessian_quant(hc)->run(b.ctx));
  ASSERT_EQ(a.fixed.size(), b.fixed.size());
  ASSERT_FALSE(a.fixed.empty());
  for (const auto& [name, f] : a.fixed) {
    auto it = b.fixed.find(name);
    ASSERT_NE(it, b.fixed.end()) << name;
    EXPECT_EQ(f.bits, it->second.bits) << name;
    EXPECT_EQ(f.codes, it->second.codes) << name;
    EXPECT_EQ(f.scales, it->second.scales) << name;
  }
  EXPECT_EQ(a.store->rewritten_weights(), b.store->rewritten_weights());
}

TEST(HessianQuant, SkipsFloatLayersAndNeedsSamples) {
  QBC_REQUIRE_SHARED(shared, "");
  QBC_REQUIRE_SHARED(dir, "models/stories260k/hf");
  const TransformCase c = ::qbc::testing::transform_cases()[0];
  config::CompileOptions o = four_bit_options();
  o.mutable_bit()->mutable_layer_overrides()->add_weight16_bits("*down_proj*");
  WeightPassRun r;
  QBC_ASSERT_OK(
      setup_weight_pass_run(r, c, shared, {::qbc::testing::transform_test_ids(512, 24)}, o));
  QBC_ASSERT_OK(make_hessian_quant(hq_config())->run(r.ctx));
  for (const auto& [name, f] : r.fixed)
    EXPECT_EQ(name.find("down_proj"), std::string::npos) << name;
  expect_fixed_complete(r);

  WeightPassRun none;
  QBC_ASSERT_OK(setup_weight_pass_run(none, c, shared, {}, o));
  none.ctx.samples = nullptr;
  EXPECT_FALSE(make_hessian_quant(hq_config())->run(none.ctx).ok());
}

class HessianQuantFamilies : public ::testing::TestWithParam<TransformCase> {};

TEST_P(HessianQuantFamilies, RunsThrough) {
  const auto& c = GetParam();
  QBC_REQUIRE_TRANSFORM_CASE(shared, c);
  std::vector<std::vector<int32_t>> calib;
  for (size_t i = 0; i < 4; ++i) {
    std::vector<int32_t> ids = ::qbc::testing::transform_test_ids(256, 16 + 5 * i);
    for (int32_t& id : ids) id = static_cast<int32_t>((id + 17 * i) % 256);
    calib.push_back(ids);
  }
  WeightPassRun fp, r;
  QBC_ASSERT_OK(setup_weight_pass_run(fp, c, shared, calib, four_bit_options()));
  QBC_ASSERT_OK(setup_weight_pass_run(r, c, shared, calib, four_bit_options()));
  auto changed = make_hessian_quant(hq_config())->run(r.ctx);
  QBC_ASSERT_OK(changed);
  EXPECT_TRUE(*changed);
  expect_fixed_complete(r);
  // The quantized model still runs and stays near the float one.
  const std::vector<int32_t> ids = ::qbc::testing::transform_test_ids(256, 12);
  auto a = ::qbc::testing::float_logits(fp.model.graph, fp.store->reader(), ids);
  QBC_ASSERT_OK(a);
  auto b = ::qbc::testing::float_logits(r.model.graph, r.store->reader(), ids);
  QBC_ASSERT_OK(b);
  ASSERT_EQ(a->size(), b->size());
  for (float v : *b) ASSERT_TRUE(std::isfinite(v));
  const double err = ::qbc::testing::max_relative_error(*a, *b);
  std::printf("%s: max relative logit error %.4f\n", c.name.c_str(), err);
  EXPECT_LT(err, 1.0);
}

std::vector<TransformCase> family_cases() {
  std::vector<TransformCase> out;
  for (const TransformCase& c : ::qbc::testing::transform_cases()) {
    if (c.shared_dir.empty()) out.push_back(c);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Random, HessianQuantFamilies, ::testing::ValuesIn(family_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace qbc::quant
