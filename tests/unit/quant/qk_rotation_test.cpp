// qkRotation (src/quant/qk_rotation.cpp): leaves the float logits unchanged on every
// family, rotates every query head of a KV group by its KV head's angle (the test that
// fails when that tie is removed), leaves QK-norm attention alone, never raises the
// round-to-nearest error of the q/k weights it chose the angles for, and is
// deterministic.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/quant/gptq.h"
#include "qbc/quant/pass.h"
#include "qbc/quant/transforms.h"
#include "qbc/quant/weight_store.h"
#include "transform_cases.h"

namespace qbc::quant {
namespace {

using ::qbc::testing::LoadedCase;
using ::qbc::testing::TransformCase;

config::CompileOptions qk4_options() {
  config::CompileOptions o = config::defaults();
  o.mutable_bit()->mutable_transformer()->mutable_weight()->set_query(4);
  o.mutable_bit()->mutable_transformer()->mutable_weight()->set_key(4);
  return o;
}

/// A graph copy and its weight store after qkRotation.
struct Rotated {
  Rotated(ir::WeightReader source, ir::Graph g) : store(std::move(source)), graph(std::move(g)) {}
  WeightStore store;
  ir::Graph graph;
  bool changed = false;
};

StatusOr<std::unique_ptr<Rotated>> rotate(const LoadedCase& m,
                                          const config::CompileOptions& options) {
  auto r = std::make_unique<Rotated>(frontend::model_weight_reader(*m.source), m.graph);
  PassContext ctx;
  ctx.graph = &r->graph;
  ctx.weights = &r->store;
  ctx.options = &options;
  std::vector<std::unique_ptr<Pass>> passes;
  passes.push_back(make_qk_rotation());
  std::vector<PassRecord> records;
  QBC_RETURN_IF_ERROR(run_passes(passes, ctx, &records));
  r->changed = !records.empty() && records[0].changed;
  return r;
}

std::vector<float> read(const WeightStore& s, const ir::Graph& g, const std::string& name) {
  std::vector<float> out;
  const ir::Weight* w = g.find_weight(name);
  EXPECT_NE(w, nullptr) << name;
  if (w != nullptr) {
    EXPECT_TRUE(s.read(*w, &out).ok()) << name;
  }
  return out;
}

/// The q and k projection weights of block `b`: separate, or the two row ranges of a fused qkv.
struct QkWeights {
  std::string q, k;  // weight names (equal when fused)
  int64_t q_off = 0, k_off = 0;
};

QkWeights qk_weights(const ir::Graph& g, int b) {
  QkWeights w;
  const std::string p = "blk." + std::to_string(b) + ".attn.";
  if (g.find(p + "q_proj") >= 0) {
    w.q = g.node(g.find(p + "q_proj")).operands[1].weight;
    w.k = g.node(g.find(p + "k_proj")).operands[1].weight;
  } else {
    const ir::Node& f = g.node(g.find(p + "qkv_proj"));
    w.q = w.k = f.operands[1].weight;
    const ir::Node& ks = g.node(g.find(p + "k"));
    w.k_off = ks.attrs.get_int("start");
  }
  return w;
}

/// The angle φ that maps rows (a, b) of `before` onto rows (a, b) of `after`
/// (a' = cos φ·a − sin φ·b, b' = sin φ·a + cos φ·b), by least squares.
double angle(const std::vector<float>& before, const std::vector<float>& after, int64_t in,
             int64_t a, int64_t b) {
  double c = 0, s = 0;
  for (int64_t j = 0; j < in; ++j) {
    const double x = before[a * in + j], y = before[b * in + j];
    const double xp = after[a * in + j], yp = after[b * in + j];
    c += x * xp + y * yp;
    s += x * yp - y * xp;
  }
  return std::atan2(s, c);
}

StatusOr<LoadedCase> load(const TransformCase& c) {
  return ::qbc::testing::load_transform_case(c, ::qbc::testing::shared_dir());
}

class QkRotationFamilies : public ::testing::TestWithParam<TransformCase> {};

TEST_P(QkRotationFamilies, LogitsUnchangedAndPairsTiedAcrossTheGroup) {
  const TransformCase& c = GetParam();
  QBC_REQUIRE_TRANSFORM_CASE(shared, c);
  auto m = load(c);
  QBC_ASSERT_OK(m);
  const config::CompileOptions options = qk4_options();
  auto r = rotate(*m, options);
  QBC_ASSERT_OK(r);
  const ir::Graph& g = (*r)->graph;
  const bool qk_norm = g.find("blk.0.attn.q_norm") >= 0;
  if (qk_norm) {
    // A per-head norm gain sits between the projection and RoPE: left alone.
    EXPECT_FALSE((*r)->changed);
    EXPECT_TRUE((*r)->store.rewritten_names().empty());
    return;
  }
  ASSERT_TRUE((*r)->changed) << "no pair of a 4-bit q/k found a better angle";

  const std::vector<int32_t> ids = ::qbc::testing::transform_test_ids(m->vocab);
  auto before =
      ::qbc::testing::float_logits(m->graph, frontend::model_weight_reader(*m->source), ids);
  auto after = ::qbc::testing::float_logits(g, (*r)->store.reader(), ids);
  QBC_ASSERT_OK(before);
  QBC_ASSERT_OK(after);
  const double err = ::qbc::testing::max_relative_error(*before, *after);
  std::printf("%s: max relative logit error %.3g\n", c.name.c_str(), err);
  EXPECT_LE(err, 1e-4);

  // Every query head of a KV group turned by its KV head's angle, on every pair.
  const ir::Node& att = g.node(g.find("blk.0.attn.sdpa"));
  const int64_t H = att.attrs.get_int("num_heads"), KV = att.attrs.get_int("num_kv_heads");
  const int64_t d = att.attrs.get_int("head_dim"), group = H / KV;
  const int64_t rotary = g.node(g.find("blk.0.attn.q_rope")).attrs.get_int("rotary_dim");
  const QkWeights w = qk_weights(g, 0);
  const ir::WeightReader orig = frontend::model_weight_reader(*m->source);
  std::vector<float> q0, k0;
  QBC_ASSERT_OK(orig(*m->graph.find_weight(w.q), &q0));
  QBC_ASSERT_OK(orig(*m->graph.find_weight(w.k), &k0));
  const std::vector<float> q1 = read((*r)->store, g, w.q), k1 = read((*r)->store, g, w.k);
  const int64_t in = g.find_weight(w.q)->type.dims[1];
  int turned = 0;
  for (int64_t kv = 0; kv < KV; ++kv) {
    for (int64_t i = 0; i < rotary / 2; ++i) {
      const int64_t ka = w.k_off + kv * d + i, kb = ka + rotary / 2;
      const double phi = angle(k0, k1, in, ka, kb);
      turned += std::fabs(phi) > 1e-6;
      for (int64_t h = kv * group; h < (kv + 1) * group; ++h) {
        const int64_t qa = w.q_off + h * d + i, qb = qa + rotary / 2;
        EXPECT_NEAR(angle(q0, q1, in, qa, qb), phi, 1e-5)
            << "kv head " << kv << ", query head " << h << ", pair " << i;
      }
    }
  }
  std::printf("%s: block 0: %d of %lld (KV head, rotary pair)s turned\n", c.name.c_str(), turned,
              static_cast<long long>(KV * rotary / 2));

  // Removing the tie (query head 0 keeps its original rows) changes the logits.
  if (turned > 0) {
    std::vector<float> untied = q1;
    for (int64_t row = w.q_off; row < w.q_off + d; ++row) {
      for (int64_t j = 0; j < in; ++j) untied[row * in + j] = q0[row * in + j];
    }
    WeightStore broken((*r)->store.reader());
    QBC_ASSERT_OK(broken.write(w.q, untied));
    auto wrong = ::qbc::testing::float_logits(g, broken.reader(), ids);
    QBC_ASSERT_OK(wrong);
    EXPECT_GT(::qbc::testing::max_relative_error(*before, *wrong), 1e-3)
        << "the Q/K pair tie is not needed?";
  }
}

INSTANTIATE_TEST_SUITE_P(All, QkRotationFamilies,
                         ::testing::ValuesIn(::qbc::testing::transform_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(QkRotation, NeverRaisesTheRoundingErrorItTargetsAndIsDeterministic) {
  const TransformCase& c = ::qbc::testing::find_transform_case("stories260k");
  QBC_REQUIRE_TRANSFORM_CASE(shared, c);
  auto m = ::qbc::testing::load_transform_case(c, shared);
  QBC_ASSERT_OK(m);
  const config::CompileOptions options = qk4_options();
  auto a = rotate(*m, options);
  auto b = rotate(*m, options);
  QBC_ASSERT_OK(a);
  QBC_ASSERT_OK(b);
  ASSERT_TRUE((*a)->changed);
  const ir::WeightReader orig = frontend::model_weight_reader(*m->source);
  double before = 0, after = 0;
  for (const ir::Node& n : m->graph.nodes()) {
    if (n.op != ir::Op::kLinear) continue;
    if (n.name.find("q_proj") == std::string::npos && n.name.find("k_proj") == std::string::npos)
      continue;
    const ir::Weight& w = *m->graph.find_weight(n.operands[1].weight);
    std::vector<float> w0;
    QBC_ASSERT_OK(orig(w, &w0));
    const std::vector<float> w1 = read((*a)->store, (*a)->graph, w.name);
    EXPECT_EQ(w1, read((*b)->store, (*b)->graph, w.name)) << w.name;
    GptqOptions o;
    o.bits = 4;
    auto err = [&](const std::vector<float>& x) {
      auto r = rtn_quantize(x, w.type.dims[0], w.type.dims[1], o);
      EXPECT_TRUE(r.ok());
      const std::vector<float> dq = dequantize(*r);
      double e = 0;
      for (size_t k = 0; k < x.size(); ++k)
        e += (static_cast<double>(dq[k]) - x[k]) * (dq[k] - x[k]);
      return e;
    };
    before += err(w0);
    after += err(w1);
  }
  std::printf("stories260K q/k 4-bit RTN squared error: %.6g -> %.6g (%.1f%% lower)\n", before,
              after, 100.0 * (1 - after / before));
  EXPECT_LT(after, before);  // the sum the angles were chosen on (per pair, q and k rows together)
}

}  // namespace
}  // namespace qbc::quant
