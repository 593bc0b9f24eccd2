// searchWeightScale (AWQ scale search + clip search): its scale folding leaves the float
// logits unchanged on every family (GQA tie of o_proj, biases, QK-norms, Gemma's
// unit-offset norms, fused projections); on stories260K at 4-bit weights the chosen
// integers are closer to the float model than round-to-nearest on held-out text; it is
// deterministic; it records valid integers for every searched linear.
#include <gtest/gtest.h>

#include <algorithm>
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

config::SearchWeightScaleConfig awq_config() {
  config::SearchWeightScaleConfig c = config::defaults().search_weight_scale();
  c.set_apply(true);
  return c;
}

std::vector<std::vector<int32_t>> synthetic_sequences(int64_t vocab, size_t n) {
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < n; ++i) {
    std::vector<int32_t> ids = ::qbc::testing::transform_test_ids(vocab, 16 + 5 * i);
    for (int32_t& id : ids) id = static_cast<int32_t>((id + 17 * i) % vocab);
    out.push_back(ids);
  }
  return out;
}

using Model = WeightPassRun;

/// Every fixed entry has the linear's bits and shape, codes in range, positive scales.
void expect_fixed_valid(const Model& r) {
  const ir::Graph& g = r.model.graph;
  for (const auto& [name, f] : r.fixed) {
    const ir::ValueId id = g.find(name);
    ASSERT_GE(id, 0) << name;
    const ir::Node& n = g.node(id);
    ASSERT_EQ(n.op, ir::Op::kLinear) << name;
    EXPECT_EQ(f.bits, linear_bits(name, n.part == ir::Part::kHead, r.options).weight) << name;
    const ir::Weight* w = g.find_weight(n.operands[1].weight);
    const int64_t rows = w->type.dims[0], cols = w->type.dims[1];
    ASSERT_EQ(f.codes.size(), static_cast<size_t>(rows * cols)) << name;
    ASSERT_EQ(f.scales.size(), static_cast<size_t>(rows)) << name;
    const int lo = -(1 << (f.bits - 1)), hi = (1 << (f.bits - 1)) - 1;
    for (int8_t q : f.codes) ASSERT_TRUE(q >= lo && q <= hi) << name;
    for (float s : f.scales) ASSERT_TRUE(std::fabs(s) >= 1e-8f && std::isfinite(s)) << name;
  }
}

/// Writes into r's store, for every linear not left in float: the dequantized fixed
/// integers when `use_fixed` and the pass chose them, else per-row RTN of the current
/// float weight (as quantize_rtn).
Status quantize_model(Model& r, bool use_fixed) {
  const ir::Graph g = r.model.graph;
  for (const ir::Node& n : g.nodes()) {
    if (n.op != ir::Op::kLinear) continue;
    const int bits = linear_bits(n.name, n.part == ir::Part::kHead, r.options).weight;
    if (bits == 16) continue;
    const ir::Weight* w = g.find_weight(n.operands[1].weight);
    const int64_t rows = w->type.dims[0], cols = w->type.dims[1];
    std::vector<float> data;
    QBC_RETURN_IF_ERROR(r.store->read(*w, &data));
    auto it = r.fixed.find(n.name);
    if (use_fixed && it != r.fixed.end()) {
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          data[i * cols + j] = static_cast<float>(static_cast<double>(it->second.scales[i]) *
                                                  it->second.codes[i * cols + j]);
        }
      }
    } else {
      GptqOptions o;
      o.bits = bits;
      QBC_ASSIGN_OR_RETURN(GptqResult q, rtn_quantize(data, rows, cols, o));
      data = dequantize(q);
    }
    rewrite_weight(r.ctx, w->name, std::move(data));
  }
  return ok_status();
}

// ---------------------------------------------------------------------------

class SearchWeightScaleFamilies : public ::testing::TestWithParam<TransformCase> {};

TEST_P(SearchWeightScaleFamilies, FoldingLeavesFloatLogitsUnchanged) {
  const TransformCase& c = GetParam();
  QBC_REQUIRE_TRANSFORM_CASE(shared, c);
  Model r;
  {
    auto m = ::qbc::testing::load_transform_case(c, shared);
    QBC_ASSERT_OK(m);
    QBC_ASSERT_OK(
        setup_weight_pass_run(r, c, shared, synthetic_sequences(m->vocab, 6), four_bit_options()));
  }
  const std::vector<int32_t> ids = ::qbc::testing::transform_test_ids(r.model.vocab);
  auto before = ::qbc::testing::float_logits(r.model.graph, r.store->reader(), ids);
  QBC_ASSERT_OK(before);
  std::vector<std::unique_ptr<Pass>> passes;
  passes.push_back(make_search_weight_scale(awq_config()));
  EXPECT_EQ(passes[0]->name(), "searchWeightScale");
  std::vector<PassRecord> records;
  QBC_ASSERT_OK(run_passes(passes, r.ctx, &records));
  ASSERT_EQ(records.size(), 1u);
  EXPECT_TRUE(records[0].changed);
  auto after = ::qbc::testing::float_logits(r.model.graph, r.store->reader(), ids);
  QBC_ASSERT_OK(after);
  const double err = ::qbc::testing::max_relative_error(*before, *after);
  int folded_v = 0, folded_norms = 0;
  for (const ir::Node& n : r.model.graph.nodes()) {
    if (n.op == ir::Op::kRmsNorm && r.store->rewritten(n.operands[1].weight)) ++folded_norms;
    if (n.op == ir::Op::kLinear && n.name.find("v_proj") != std::string::npos &&
        r.store->rewritten(n.operands[1].weight)) {
      ++folded_v;
    }
  }
  std::printf(
      "[searchWeightScale] %s: max relative logit error %.3g, %d norms and %d v_proj folded, %zu "
      "fixed\n",
      c.name.c_str(), err, folded_norms, folded_v, r.fixed.size());
  EXPECT_LE(err, 1e-4);
  EXPECT_GT(folded_norms + folded_v, 0) << "no scale was folded: the check would be vacuous";
  EXPECT_FALSE(r.fixed.empty());
  expect_fixed_valid(r);

  // Only the o_proj group: v_proj rows take 1/s (tied over each GQA group), so the
  // check covers the value → o_proj fold on its own (not for fused qkv, clip only).
  config::SearchWeightScaleConfig out_only = awq_config();
  out_only.mutable_transformer()->set_query(false);
  out_only.mutable_transformer()->set_key(false);
  out_only.mutable_transformer()->set_value(false);
  out_only.mutable_transformer()->set_ffn(false);
  Model o;
  QBC_ASSERT_OK(setup_weight_pass_run(o, c, shared, synthetic_sequences(r.model.vocab, 6),
                                      four_bit_options()));
  QBC_ASSERT_OK(make_search_weight_scale(out_only)->run(o.ctx));
  auto after_o = ::qbc::testing::float_logits(o.model.graph, o.store->reader(), ids);
  QBC_ASSERT_OK(after_o);
  int v_rows_folded = 0;
  bool separate_v = false;  // Phi-3 and Phi-4-mini fuse q, k and v into one qkv_proj
  for (const ir::Node& n : o.model.graph.nodes()) {
    separate_v = separate_v || n.name.find("attn.v_proj") != std::string::npos;
    if (n.op == ir::Op::kLinear && n.name.find("attn.v_proj") != std::string::npos &&
        o.store->rewritten(n.operands[1].weight)) {
      ++v_rows_folded;
    }
  }
  const double err_o = ::qbc::testing::max_relative_error(*before, *after_o);
  std::printf(
      "[searchWeightScale] %s, o_proj group only: max relative logit error %.3g, %d v_proj "
      "folded\n",
      c.name.c_str(), err_o, v_rows_folded);
  EXPECT_LE(err_o, 1e-4);
  if (separate_v) {
    EXPECT_GT(v_rows_folded, 0);
  }
  for (const auto& [name, f] : o.fixed) EXPECT_NE(name.find("o_proj"), std::string::npos) << name;
}

INSTANTIATE_TEST_SUITE_P(All, SearchWeightScaleFamilies,
                         ::testing::ValuesIn(::qbc::testing::transform_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(SearchWeightScale, Stories260kBeatsRoundToNearestAt4Bits) {
  QBC_REQUIRE_SHARED(shared, "");
  QBC_REQUIRE_SHARED(dir, "models/stories260k/hf");
  QBC_REQUIRE_SHARED(calib_txt, "data/tinystories/calib.clean.txt");
  QBC_REQUIRE_SHARED(eval_txt, "data/tinystories/eval.clean.txt");
  auto tok = tokenizer::Tokenizer::from_hf_dir(dir);
  QBC_ASSERT_OK(tok);
  const auto calib = text_sequences(*tok, calib_txt, 0, 32, 64);
  const auto held_out = text_sequences(*tok, eval_txt, 0, 12, 64);
  ASSERT_EQ(calib.size(), 32u);
  ASSERT_EQ(held_out.size(), 12u);
  const TransformCase c = ::qbc::testing::transform_cases()[0];
  ASSERT_EQ(c.name, "stories260k");

  Model fp, rtn, awq, scale_only;
  QBC_ASSERT_OK(setup_weight_pass_run(fp, c, shared, calib, four_bit_options()));
  QBC_ASSERT_OK(setup_weight_pass_run(rtn, c, shared, calib, four_bit_options()));
  QBC_ASSERT_OK(setup_weight_pass_run(awq, c, shared, calib, four_bit_options()));
  QBC_ASSERT_OK(setup_weight_pass_run(scale_only, c, shared, calib, four_bit_options()));
  auto changed = make_search_weight_scale(awq_config())->run(awq.ctx);
  QBC_ASSERT_OK(changed);
  EXPECT_TRUE(*changed);
  QBC_ASSERT_OK(make_search_weight_scale(awq_config())->run(scale_only.ctx));
  expect_fixed_valid(awq);
  // Every block linear got integers; the head (8 bits, not searched) did not.
  int block_linears = 0;
  for (const ir::Node& n : awq.model.graph.nodes()) {
    if (n.op != ir::Op::kLinear) continue;
    const bool head = n.part == ir::Part::kHead;
    EXPECT_EQ(awq.fixed.count(n.name), head ? 0u : 1u) << n.name;
    block_linears += head ? 0 : 1;
  }
  EXPECT_EQ(static_cast<int>(awq.fixed.size()), block_linears);

  QBC_ASSERT_OK(quantize_model(rtn, true));          // nothing fixed: plain RTN
  QBC_ASSERT_OK(quantize_model(awq, true));          // scales + clip
  QBC_ASSERT_OK(quantize_model(scale_only, false));  // scales, RTN of the folded weights
  auto ref_logits = all_logits(fp.model.graph, fp.store->reader(), held_out);
  QBC_ASSERT_OK(ref_logits);
  auto rtn_logits = all_logits(rtn.model.graph, rtn.store->reader(), held_out);
  QBC_ASSERT_OK(rtn_logits);
  auto awq_logits = all_logits(awq.model.graph, awq.store->reader(), held_out);
  QBC_ASSERT_OK(awq_logits);
  auto so_logits = all_logits(scale_only.model.graph, scale_only.store->reader(), held_out);
  QBC_ASSERT_OK(so_logits);
  const Distance d_rtn = distance(*ref_logits, *rtn_logits, fp.model.vocab);
  const Distance d_awq = distance(*ref_logits, *awq_logits, fp.model.vocab);
  const Distance d_so = distance(*ref_logits, *so_logits, fp.model.vocab);
  std::printf("stories260K W4 held-out: RTN              KL %.6f  MSE %.6f\n", d_rtn.kl, d_rtn.mse);
  std::printf("stories260K W4 held-out: AWQ scales only  KL %.6f  MSE %.6f\n", d_so.kl, d_so.mse);
  std::printf("stories260K W4 held-out: AWQ scales+clip  KL %.6f  MSE %.6f\n", d_awq.kl, d_awq.mse);
  EXPECT_GT(d_rtn.kl, 0.0);
  EXPECT_LT(d_awq.kl, d_rtn.kl);
  EXPECT_LT(d_awq.mse, d_rtn.mse);
}

TEST(SearchWeightScale, Deterministic) {
  QBC_REQUIRE_SHARED(shared, "");
  QBC_REQUIRE_SHARED(dir, "models/stories260k/hf");
  const TransformCase c = ::qbc::testing::transform_cases()[0];
  const auto calib = synthetic_sequences(512, 4);
  Model a, b;
  QBC_ASSERT_OK(setup_weight_pass_run(a, c, shared, calib, four_bit_options()));
  QBC_ASSERT_OK(setup_weight_pass_run(b, c, shared, calib, four_bit_options()));
  QBC_ASSERT_OK(make_search_weight_scale(awq_config())->run(a.ctx));
  QBC_ASSERT_OK(make_search_weight_scale(awq_config())->run(b.ctx));
  ASSERT_FALSE(a.fixed.empty());
  ASSERT_EQ(a.fixed.size(), b.fixed.size());
  for (const auto& [name, f] : a.fixed) {
    auto it = b.fixed.find(name);
    ASSERT_NE(it, b.fixed.end()) << name;
    EXPECT_EQ(f.bits, it->second.bits) << name;
    EXPECT_EQ(f.codes, it->second.codes) << name;
    EXPECT_EQ(f.scales, it->second.scales) << name;
  }
  EXPECT_EQ(a.store->rewritten_weights(), b.store->rewritten_weights());
}

TEST(SearchWeightScale, FlagsFloatLayersAndPreconditions) {
  QBC_REQUIRE_SHARED(shared, "");
  QBC_REQUIRE_SHARED(dir, "models/stories260k/hf");
  const TransformCase c = ::qbc::testing::transform_cases()[0];
  const auto calib = synthetic_sequences(512, 3);

  // Only ffn on, down_proj left in float: gate/up get integers, nothing else.
  config::CompileOptions o = four_bit_options();
  o.mutable_bit()->mutable_layer_overrides()->add_weight16_bits("*down_proj*");
  config::SearchWeightScaleConfig cfg = awq_config();
  auto* t = cfg.mutable_transformer();
  t->set_query(false);
  t->set_key(false);
  t->set_value(false);
  t->set_out(false);
  t->set_ffn(true);
  Model r;
  QBC_ASSERT_OK(setup_weight_pass_run(r, c, shared, calib, o));
  QBC_ASSERT_OK(make_search_weight_scale(cfg)->run(r.ctx));
  ASSERT_FALSE(r.fixed.empty());
  for (const auto& [name, f] : r.fixed) {
    EXPECT_TRUE(name.find("gate_proj") != std::string::npos ||
                name.find("up_proj") != std::string::npos)
        << name;
  }
  for (const ir::Node& n : r.model.graph.nodes()) {
    if (n.name.find("attn") != std::string::npos && n.operands.size() > 1 &&
        n.operands[1].is_weight()) {
      EXPECT_FALSE(r.store->rewritten(n.operands[1].weight)) << n.name;
    }
  }
  expect_fixed_valid(r);

  // Everything off: no change.
  t->set_ffn(false);
  Model off;
  QBC_ASSERT_OK(setup_weight_pass_run(off, c, shared, calib, four_bit_options()));
  auto changed = make_search_weight_scale(cfg)->run(off.ctx);
  QBC_ASSERT_OK(changed);
  EXPECT_FALSE(*changed);
  EXPECT_TRUE(off.fixed.empty());

  Model none;
  QBC_ASSERT_OK(setup_weight_pass_run(none, c, shared, calib, four_bit_options()));
  none.ctx.samples = nullptr;
  std::vector<std::unique_ptr<Pass>> search;
  search.push_back(make_search_weight_scale(awq_config()));
  const Status no_samples = run_passes(search, none.ctx);
  ASSERT_FALSE(no_samples.ok());
  EXPECT_EQ(no_samples.code(), Code::kFailedPrecondition);
  EXPECT_TRUE(::qbc::testing::contains(no_samples.message(),
                                       "pass searchWeightScale needs calibration samples"))
      << no_samples.message();
}

}  // namespace
}  // namespace qbc::quant
