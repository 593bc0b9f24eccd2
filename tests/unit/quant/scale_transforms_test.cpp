// The scale migrations qk, vo, ud and normSmooth: with real calibration statistics
// they leave the float logits unchanged on every family and do what they are for
// (flatter channel ranges); with synthetic statistics that make every tie matter
// (rotary pairs, GQA groups, QK-norm gains shared by all heads, GQA expansion of vo)
// they still leave the logits unchanged, so dropping a tie fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

#include "qbc/quant/calibrate.h"
#include "qbc/quant/norm_smooth.h"
#include "qbc/quant/pass.h"
#include "qbc/quant/transforms.h"
#include "qbc/quant/weight_store.h"
#include "transform_cases.h"

namespace qbc::quant {
namespace {

using ::qbc::testing::TransformCase;

/// Calibration token sequences (< vocab), different from the evaluation ids.
std::vector<std::vector<int32_t>> calib_sequences(int64_t vocab) {
  std::vector<std::vector<int32_t>> out;
  for (int s = 0; s < 4; ++s) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 32; ++i)
      ids.push_back(static_cast<int32_t>((3 + 53 * s + 29 * i + (i * i * (s + 1)) % 17) % vocab));
    out.push_back(ids);
  }
  return out;
}

/// Statistics of `g` (mode 0: maxima only) on calib_sequences through the float Session.
StatusOr<CalibStats> calibrate(const ir::Graph& g, const ir::WeightReader& reader, int64_t vocab) {
  QBC_ASSIGN_OR_RETURN(std::unique_ptr<ref::Session> session, ref::Session::create(g, reader));
  const std::vector<std::vector<int32_t>> seqs = calib_sequences(vocab);
  ref::Session* s = session.get();
  SampleSource samples = [s, &seqs](size_t i, std::vector<float>* embeds, int64_t* seq) {
    *seq = static_cast<int64_t>(seqs[i].size());
    return s->embed(seqs[i], embeds);
  };
  return collect_stats(g, *session, seqs.size(), samples, 0);
}

/// A loaded case with its original logits, a weight store and a working copy of the graph.
struct ScaleSetup {
  ::qbc::testing::LoadedCase m;
  ir::WeightReader source;
  std::unique_ptr<WeightStore> store;
  ir::Graph g;
  std::vector<int32_t> ids;
  std::vector<float> before;
  CalibStats stats;

  /// Points `c` at this case's graph, weights and stats.
  void fill(PassContext& c) {
    c.graph = &g;
    c.weights = store.get();
    c.stats = &stats;
  }
  /// Runs `pass` with this->stats; returns whether it changed anything.
  StatusOr<bool> run(std::unique_ptr<Pass> pass) {
    std::vector<std::unique_ptr<Pass>> passes;
    passes.push_back(std::move(pass));
    std::vector<PassRecord> records;
    PassContext c;
    fill(c);
    QBC_RETURN_IF_ERROR(run_passes(passes, c, &records));
    return records.at(0).changed;
  }
  /// max relative logit error of the current graph and weights against the original.
  StatusOr<double> logit_error() const {
    QBC_ASSIGN_OR_RETURN(std::vector<float> after,
                         ::qbc::testing::float_logits(g, store->reader(), ids));
    return ::qbc::testing::max_relative_error(before, after);
  }
  StatusOr<CalibStats> recalibrate() const { return calibrate(g, store->reader(), m.vocab); }
};

StatusOr<std::unique_ptr<ScaleSetup>> load(const TransformCase& c,
                                           const std::filesystem::path& shared) {
  auto s = std::make_unique<ScaleSetup>();
  QBC_ASSIGN_OR_RETURN(s->m, ::qbc::testing::load_transform_case(c, shared));
  s->source = frontend::model_weight_reader(*s->m.source);
  s->store = std::make_unique<WeightStore>(s->source);
  s->g = s->m.graph;
  s->ids = ::qbc::testing::transform_test_ids(s->m.vocab);
  QBC_ASSIGN_OR_RETURN(s->before, ::qbc::testing::float_logits(s->g, s->source, s->ids));
  QBC_ASSIGN_OR_RETURN(s->stats, calibrate(s->g, s->source, s->m.vocab));
  return s;
}

#define LOAD_CASE_OR_FAIL(var)           \
  const TransformCase& c = GetParam();   \
  QBC_REQUIRE_TRANSFORM_CASE(shared, c); \
  auto loaded = load(c, shared);         \
  QBC_ASSERT_OK(loaded);                 \
  ScaleSetup& var = **loaded

/// The attention nodes with their shape attributes and the rotary dim of their q.
struct Attn {
  std::string q_rope, k_rope, v, sdpa;
  int64_t H = 0, KV = 0, d = 0, rotary = 0;
  bool qk_norm = false;
};
std::vector<Attn> attentions(const ir::Graph& g) {
  std::vector<Attn> out;
  for (const ir::Node& n : g.nodes()) {
    if (n.op != ir::Op::kAttention) continue;
    Attn a;
    const ir::Node& qr = g.node(n.operands[0].value);
    a.q_rope = qr.name;
    a.k_rope = g.node(n.operands[1].value).name;
    a.v = g.node(n.operands[2].value).name;
    a.sdpa = n.name;
    a.H = n.attrs.get_int("num_heads");
    a.KV = n.attrs.get_int("num_kv_heads");
    a.d = n.attrs.get_int("head_dim");
    a.rotary = qr.op == ir::Op::kRope ? qr.attrs.get_int("rotary_dim") : 0;  // 0: a NoPE layer
    a.qk_norm = g.node(qr.operands[0].value).op == ir::Op::kRmsNorm;
    out.push_back(a);
  }
  return out;
}

/// max_c / mean_c of a per-channel maximum vector.
double range_ratio(const std::vector<float>& m) {
  double mx = 0, sum = 0;
  for (float v : m) {
    mx = std::max(mx, static_cast<double>(v));
    sum += v;
  }
  return sum > 0 ? mx / (sum / static_cast<double>(m.size())) : 0.0;
}

class ScaleFamilies : public ::testing::TestWithParam<TransformCase> {};

/// Every pass, on real statistics: changes the weights and keeps the logits.
TEST_P(ScaleFamilies, LogitsUnchangedWithRealStats) {
  struct P {
    const char* name;
    std::function<std::unique_ptr<Pass>()> make;
  };
  const std::vector<P> passes = {{"qk", [] { return make_qk_scale(); }},
                                 {"vo", [] { return make_vo_scale(); }},
                                 {"ud", [] { return make_ud_scale(0.8); }},
                                 {"normSmooth", [] { return make_norm_smooth(0.5); }}};
  for (const P& p : passes) {
    LOAD_CASE_OR_FAIL(s);
    auto changed = s.run(p.make());
    QBC_ASSERT_OK(changed);
    EXPECT_TRUE(*changed) << p.name;
    auto err = s.logit_error();
    QBC_ASSERT_OK(err);
    std::printf("[%s] %s: max relative logit error %.3g\n", p.name, c.name.c_str(), *err);
    EXPECT_LE(*err, 1e-4) << p.name;
  }
}

/// The four in pipeline order, recalibrating after each (as a pipeline would).
TEST_P(ScaleFamilies, AllFourChainedStayExact) {
  LOAD_CASE_OR_FAIL(s);
  std::vector<std::unique_ptr<Pass>> passes;
  passes.push_back(make_norm_smooth(0.5));
  passes.push_back(make_vo_scale());
  passes.push_back(make_ud_scale(0.8));
  passes.push_back(make_qk_scale());
  for (auto& p : passes) {
    auto changed = s.run(std::move(p));
    QBC_ASSERT_OK(changed);
    EXPECT_TRUE(*changed);
    auto st = s.recalibrate();
    QBC_ASSERT_OK(st);
    s.stats = std::move(*st);
  }
  auto err = s.logit_error();
  QBC_ASSERT_OK(err);
  std::printf("[chain] %s: max relative logit error %.3g\n", c.name.c_str(), *err);
  EXPECT_LE(*err, 1e-4);
}

/// K maxima of the two channels of every rotary pair differ 100×: an untied λ would
/// differ within the pair and RoPE would no longer commute with it.
TEST_P(ScaleFamilies, QkRotaryPairTie) {
  LOAD_CASE_OR_FAIL(s);
  for (const Attn& a : attentions(s.g)) {
    std::vector<float>& k = s.stats.at(a.k_rope).channel_absmax;
    for (int64_t kv = 0; kv < a.KV; ++kv) {
      for (int64_t i = 0; i < a.rotary / 2; ++i)
        k[static_cast<size_t>(kv * a.d + i + a.rotary / 2)] *= 100.0f;
    }
  }
  auto changed = s.run(make_qk_scale());
  QBC_ASSERT_OK(changed);
  EXPECT_TRUE(*changed);
  auto err = s.logit_error();
  QBC_ASSERT_OK(err);
  std::printf("[qk pair tie] %s: max relative logit error %.3g\n", c.name.c_str(), *err);
  EXPECT_LE(*err, 1e-4);

  // The 1/λ block 0 applied to KV head 0's key channels (the k_norm gain, or the K rows
  // of k_proj / the fused qkv_proj): equal within each rotary pair, and free (here all
  // different, as their maxima are) on the channels beyond rotary_dim (Phi-3).
  const Attn a = attentions(s.g).at(0);
  std::string wname = a.qk_norm ? "blk.0.attn.k_norm.weight" : "blk.0.attn.k_proj.weight";
  int64_t row0 = 0;
  if (s.g.find_weight(wname) == nullptr) {
    wname = "blk.0.attn.qkv_proj.weight";
    row0 = a.H * a.d;
  }
  const ir::Weight* w = s.g.find_weight(wname);
  ASSERT_NE(w, nullptr) << wname;
  std::vector<float> old_w, new_w;
  QBC_ASSERT_OK(s.source(*s.m.graph.find_weight(wname), &old_w));  // the source's declaration
  QBC_ASSERT_OK(s.store->read(*w, &new_w));
  const int64_t cols = a.qk_norm ? 1 : w->type.dims[1];
  std::vector<double> f(static_cast<size_t>(a.d));
  for (int64_t ch = 0; ch < a.d; ++ch) {
    // The ratio on the row's largest entry (all entries of a row share it).
    size_t best = static_cast<size_t>((row0 + ch) * cols);
    for (int64_t j = 0; j < cols; ++j) {
      const size_t i = static_cast<size_t>((row0 + ch) * cols + j);
      if (std::fabs(old_w[i]) > std::fabs(old_w[best])) best = i;
    }
    f[static_cast<size_t>(ch)] = static_cast<double>(new_w[best]) / old_w[best];
  }
  for (int64_t i = 0; i < a.rotary / 2; ++i) {
    EXPECT_NEAR(f[static_cast<size_t>(i)] / f[static_cast<size_t>(i + a.rotary / 2)], 1.0, 1e-5)
        << "pair " << i;
  }
  for (int64_t i = a.rotary; i + 1 < a.d; ++i) {
    EXPECT_GT(std::fabs(f[static_cast<size_t>(i)] / f[static_cast<size_t>(i + 1)] - 1.0), 1e-4)
        << "free channel " << i;
  }
}

/// ud rescales only the up rows: the gate (split, or the first half of Phi-3's fused
/// gate_up_proj) is untouched, because act(gate) is not linear in gate.
TEST_P(ScaleFamilies, UdNeverTouchesTheGate) {
  LOAD_CASE_OR_FAIL(s);
  auto changed = s.run(make_ud_scale(0.8));
  QBC_ASSERT_OK(changed);
  EXPECT_TRUE(*changed);
  for (const auto& [name, w] : s.g.weights()) {
    if (name.find("ffn.gate_proj") != std::string::npos) {
      EXPECT_FALSE(s.store->rewritten(name)) << name;
    }
    if (name.find("ffn.gate_up_proj.weight") != std::string::npos) {
      std::vector<float> old_w, new_w;
      QBC_ASSERT_OK(s.source(*s.m.graph.find_weight(name), &old_w));  // the source's declaration
      QBC_ASSERT_OK(s.store->read(w, &new_w));
      const size_t half = old_w.size() / 2;
      EXPECT_TRUE(std::equal(old_w.begin(), old_w.begin() + static_cast<std::ptrdiff_t>(half),
                             new_w.begin()))
          << name;
      EXPECT_FALSE(std::equal(old_w.begin() + static_cast<std::ptrdiff_t>(half), old_w.end(),
                              new_w.begin() + static_cast<std::ptrdiff_t>(half)))
          << name;
    }
  }
}

/// The query heads of each GQA group have Q maxima 1×, 30×, 900×, ...: λ must come from
/// the group's max, since the group's K rows get one λ.
TEST_P(ScaleFamilies, QkGqaGroupTie) {
  LOAD_CASE_OR_FAIL(s);
  for (const Attn& a : attentions(s.g)) {
    ASSERT_GT(a.H / a.KV, 1) << "every transform case has GQA";
    std::vector<float>& q = s.stats.at(a.q_rope).channel_absmax;
    for (int64_t h = 0; h < a.H; ++h) {
      const float f = std::pow(30.0f, static_cast<float>(h % (a.H / a.KV)));
      for (int64_t c2 = 0; c2 < a.d; ++c2)
        q[static_cast<size_t>(h * a.d + c2)] *= f * (1.0f + 0.37f * static_cast<float>(c2 % 5));
    }
  }
  auto changed = s.run(make_qk_scale());
  QBC_ASSERT_OK(changed);
  EXPECT_TRUE(*changed);
  auto err = s.logit_error();
  QBC_ASSERT_OK(err);
  std::printf("[qk gqa tie] %s: max relative logit error %.3g\n", c.name.c_str(), *err);
  EXPECT_LE(*err, 1e-4);
}

/// QK-norm models: the heads have very different Q and K maxima, but the scale goes into
/// the q_norm/k_norm gains that every head shares (so it must be one vector from the max
/// over all heads), never into the projection rows that the norm would undo.
// Only the families with QK-norms (instantiated below).
class QkNormFamilies : public ScaleFamilies {};

TEST_P(QkNormFamilies, QkNormGainSharedByAllHeads) {
  LOAD_CASE_OR_FAIL(s);
  const std::vector<Attn> atts = attentions(s.g);
  ASSERT_FALSE(atts.empty());
  ASSERT_TRUE(atts[0].qk_norm) << c.name << " has no QK-norms";
  for (const Attn& a : atts) {
    std::vector<float>& q = s.stats.at(a.q_rope).channel_absmax;
    std::vector<float>& k = s.stats.at(a.k_rope).channel_absmax;
    for (int64_t h = 0; h < a.H; ++h) {
      for (int64_t c2 = 0; c2 < a.d; ++c2)
        q[static_cast<size_t>(h * a.d + c2)] *= std::pow(7.0f, static_cast<float>((h + c2) % 4));
    }
    for (int64_t kv = 0; kv < a.KV; ++kv) {
      for (int64_t c2 = 0; c2 < a.d; ++c2)
        k[static_cast<size_t>(kv * a.d + c2)] *=
            std::pow(11.0f, static_cast<float>((kv + 2 * c2) % 3));
    }
  }
  auto changed = s.run(make_qk_scale());
  QBC_ASSERT_OK(changed);
  EXPECT_TRUE(*changed);
  for (const auto& [name, w] : s.g.weights()) {
    const bool proj = name.find("attn.q_proj") != std::string::npos ||
                      name.find("attn.k_proj") != std::string::npos;
    const bool gain = name.find("attn.q_norm") != std::string::npos ||
                      name.find("attn.k_norm") != std::string::npos;
    if (proj) {
      EXPECT_FALSE(s.store->rewritten(name)) << name;
    }
    if (gain) {
      EXPECT_TRUE(s.store->rewritten(name)) << name;
    }
  }
  auto err = s.logit_error();
  QBC_ASSERT_OK(err);
  std::printf("[qk norm tie] %s: max relative logit error %.3g\n", c.name.c_str(), *err);
  EXPECT_LE(*err, 1e-4);
}

/// vo: the o_proj input maxima differ 1×, 30×, ... between the query heads of a group
/// (s must come from the group's max: V rows get one s per KV channel) and 1×, 50×, ...
/// between KV heads (the o_proj columns of query head h must take the s of KV head h / g;
/// expanding by h % KV would fail here).
TEST_P(ScaleFamilies, VoGqaTieAndExpansion) {
  LOAD_CASE_OR_FAIL(s);
  for (const Attn& a : attentions(s.g)) {
    const int64_t group = a.H / a.KV;
    std::vector<float>& x = s.stats.at(a.sdpa).channel_absmax;
    for (int64_t h = 0; h < a.H; ++h) {
      const float f = std::pow(30.0f, static_cast<float>(h % group)) *
                      std::pow(50.0f, static_cast<float>((h / group) % 3));
      for (int64_t c2 = 0; c2 < a.d; ++c2) x[static_cast<size_t>(h * a.d + c2)] *= f;
    }
  }
  auto changed = s.run(make_vo_scale());
  QBC_ASSERT_OK(changed);
  EXPECT_TRUE(*changed);
  auto err = s.logit_error();
  QBC_ASSERT_OK(err);
  std::printf("[vo gqa] %s: max relative logit error %.3g\n", c.name.c_str(), *err);
  EXPECT_LE(*err, 1e-4);
}

/// What each pass is for, measured as max/mean over channels of the per-channel maxima on
/// fresh statistics of the transformed graph: ud flattens every down_proj input (α = 0.8)
/// and qk every post-RoPE key; vo (the o_proj inputs) and normSmooth (the norm outputs
/// feeding q/k/v, gate/up, lm_head) use α = 0.5, which balances activation against weight
/// ranges, so a single block may get less flat when its weight columns are the spikier
/// side: those are checked on the mean over blocks.
TEST_P(ScaleFamilies, PassesFlattenWhatTheyTarget) {
  struct P {
    const char* name;
    std::function<std::unique_ptr<Pass>()> make;
    std::function<bool(const std::string&)> is_target;
    bool every_target;
  };
  auto ends_with = [](const std::string& n, const std::string& sfx) {
    return n.size() >= sfx.size() && n.compare(n.size() - sfx.size(), sfx.size(), sfx) == 0;
  };
  const std::vector<P> passes = {
      {"ud", [] { return make_ud_scale(0.8); },
       [&](const std::string& n) { return ends_with(n, ".ffn.act"); }, true},
      {"qk", [] { return make_qk_scale(); },
       [&](const std::string& n) { return ends_with(n, ".attn.k_rope"); }, true},
      {"vo", [] { return make_vo_scale(); },
       [&](const std::string& n) { return ends_with(n, ".attn.sdpa"); }, false},
      {"normSmooth", [] { return make_norm_smooth(0.5); },
       [&](const std::string& n) {
         return ends_with(n, "attn_norm") || ends_with(n, "ffn_norm") || n == "output_norm";
       },
       false},
  };
  for (const P& p : passes) {
    LOAD_CASE_OR_FAIL(s);
    auto changed = s.run(p.make());
    QBC_ASSERT_OK(changed);
    auto after = s.recalibrate();
    QBC_ASSERT_OK(after);
    double sum_before = 0, sum_after = 0;
    int n = 0;
    for (const ir::Node& node : s.g.nodes()) {
      const std::string& t = node.name;
      if (!p.is_target(t)) continue;
      const double rb = range_ratio(s.stats.at(t).channel_absmax),
                   ra = range_ratio(after->at(t).channel_absmax);
      std::printf("[%s flattens] %s %s: max/mean %.3g -> %.3g", p.name, c.name.c_str(), t.c_str(),
                  rb, ra);
      if (std::string(p.name) == "qk") {  // where K's range went
        const std::string q = t.substr(0, t.size() - 6) + "q_rope";
        std::printf(" (q: %.3g -> %.3g)", range_ratio(s.stats.at(q).channel_absmax),
                    range_ratio(after->at(q).channel_absmax));
      }
      std::printf("\n");
      sum_before += rb;
      sum_after += ra;
      ++n;
      if (p.every_target) {
        EXPECT_LT(ra, rb) << p.name << " " << t;
      }
    }
    ASSERT_GT(n, 0) << p.name;
    EXPECT_LT(sum_after, sum_before) << p.name << ": mean max/mean ratio over " << n << " targets";
  }
}

INSTANTIATE_TEST_SUITE_P(WithQkNorm, QkNormFamilies, ::testing::ValuesIn([] {
                           std::vector<::qbc::testing::TransformCase> out;
                           for (const auto& c : ::qbc::testing::transform_cases())
                             if (c.name.find("qk_norm") != std::string::npos) out.push_back(c);
                           return out;
                         }()),
                         [](const auto& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(All, ScaleFamilies, ::testing::ValuesIn(::qbc::testing::transform_cases()),
                         [](const auto& info) { return info.param.name; });

/// Every pass needs statistics, and names the node it lacks.
TEST(ScaleTransforms, MissingStatsAreAFailedPrecondition) {
  QBC_REQUIRE_SHARED(shared, "");
  QBC_REQUIRE_SHARED(dir, "models/stories260k/hf");
  auto m = ::qbc::testing::load_transform_case(
      {"stories260k", "models/stories260k/hf", "", "", "", ""}, shared);
  QBC_ASSERT_OK(m);
  WeightStore store(frontend::model_weight_reader(*m->source));
  ir::Graph g = m->graph;
  for (auto make : std::vector<std::function<std::unique_ptr<Pass>()>>{
           [] { return make_qk_scale(); }, [] { return make_vo_scale(); },
           [] { return make_ud_scale(0.8); }, [] { return make_norm_smooth(0.5); }}) {
    std::vector<std::unique_ptr<Pass>> passes;
    passes.push_back(make());
    Pass* pass = passes[0].get();
    const config::CompileOptions options = config::defaults();
    PassContext ctx;
    ctx.graph = &g;
    ctx.weights = &store;
    ctx.options = &options;
    // No statistics at all: the pass manager refuses the pass before it runs.
    const Status none = run_passes(passes, ctx);
    ASSERT_FALSE(none.ok()) << pass->name();
    EXPECT_EQ(none.code(), Code::kFailedPrecondition) << pass->name();
    EXPECT_TRUE(
        ::qbc::testing::contains(none.message(), "needs statistics of the transformed float graph"))
        << none.message();
    CalibStats empty;
    ctx.stats = &empty;
    auto missing = pass->run(ctx);
    ASSERT_FALSE(missing.ok()) << pass->name();
    EXPECT_EQ(missing.status().code(), Code::kFailedPrecondition) << pass->name();
    EXPECT_TRUE(::qbc::testing::contains(missing.status().message(), "blk.0."))
        << missing.status().message();
  }
  EXPECT_TRUE(store.rewritten_weights().empty());
}

}  // namespace
}  // namespace qbc::quant
