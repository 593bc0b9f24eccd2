// Block-by-block calibration gives the statistics of whole-model calibration, on a
// model with a prefix node (Gemma's embed_scale), post-norms and a soft-capped head,
// on stories260K, and on a Qwen3-VL language model with DeepStack rows; and the runner's
// prefix runs (GPTQ's) compute what the whole segment computes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>

#include "qbc/frontend/random_model.h"
#include "qbc/numerics/fp16.h"
#include "qbc/quant/block_runner.h"
#include "qbc/quant/calibrate.h"
#include "transform_cases.h"

namespace qbc::quant {
namespace {

void expect_same_stats(const CalibStats& a, const CalibStats& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, s] : a) {
    auto it = b.find(name);
    ASSERT_NE(it, b.end()) << name;
    const TensorStats& t = it->second;
    EXPECT_EQ(s.count, t.count) << name;
    EXPECT_NEAR(s.absmax, t.absmax, 1e-5 * s.absmax) << name;
    ASSERT_EQ(s.channel_min.size(), t.channel_min.size()) << name;
    for (size_t c = 0; c < s.channel_min.size(); ++c) {
      EXPECT_NEAR(s.channel_min[c], t.channel_min[c], 1e-5 * s.absmax) << name << " " << c;
      EXPECT_NEAR(s.channel_max[c], t.channel_max[c], 1e-5 * s.absmax) << name << " " << c;
    }
    ASSERT_EQ(s.pair_radius.size(), t.pair_radius.size()) << name;
    for (size_t p = 0; p < s.pair_radius.size(); ++p) {
      EXPECT_NEAR(s.pair_radius[p], t.pair_radius[p], 1e-5 * s.absmax) << name << " pair " << p;
      EXPECT_GT(s.pair_radius[p], 0.0f) << name << " pair " << p;
    }
    double ha = 0, hb = 0;
    for (double v : s.histogram) ha += v;
    for (double v : t.histogram) hb += v;
    EXPECT_EQ(ha, hb) << name;
  }
}

class BlockwiseCalibration : public ::testing::TestWithParam<::qbc::testing::TransformCase> {};

TEST_P(BlockwiseCalibration, EqualsWholeModelCalibration) {
  const auto& c = GetParam();
  QBC_REQUIRE_TRANSFORM_CASE(shared, c);
  auto m = ::qbc::testing::load_transform_case(c, shared);
  QBC_ASSERT_OK(m);
  const ir::WeightReader reader = frontend::model_weight_reader(*m->source);
  auto whole = ref::Session::create(m->graph, reader);
  QBC_ASSERT_OK(whole);
  std::vector<std::vector<float>> embeds;
  for (size_t i = 0; i < 3; ++i) {
    std::vector<int32_t> ids = ::qbc::testing::transform_test_ids(m->vocab, 10 + 7 * i);
    for (int32_t& id : ids) id = static_cast<int32_t>((id + 13 * i) % m->vocab);
    std::vector<float> e;
    QBC_ASSERT_OK((*whole)->embed(ids, &e));
    embeds.push_back(e);
  }
  const int64_t hidden = (*whole)->hidden_size();
  SampleSource samples = [&](size_t i, std::vector<float>* out, int64_t* seq) {
    *out = embeds[i];
    *seq = static_cast<int64_t>(out->size()) / hidden;
    return ok_status();
  };
  for (int mode : {0, 2}) {
    auto a = collect_stats(m->graph, **whole, embeds.size(), samples, mode);
    QBC_ASSERT_OK(a);
    auto b = collect_stats_blockwise(m->graph, reader, embeds.size(), samples, mode);
    QBC_ASSERT_OK(b);
    EXPECT_FALSE(a->empty());
    // The pre-RoPE keys carry their rotary pair radii.
    const auto keys = rotated_key_inputs(m->graph);
    ASSERT_FALSE(keys.empty());
    for (const auto& [name, pairing] : keys) EXPECT_FALSE(a->at(name).pair_radius.empty()) << name;
    expect_same_stats(*a, *b);
  }
}

INSTANTIATE_TEST_SUITE_P(All, BlockwiseCalibration,
                         ::testing::ValuesIn(::qbc::testing::transform_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace qbc::quant

namespace qbc::quant {
namespace {

// Qwen3-VL: the DeepStack rows a DeepStackSource gives reach the blocks that add them. Block-wise
// statistics with the rows equal those of a whole-model float session given the same rows
// (Session::set_deepstack, as the runtime and eval feed them), rows rounded to fp16 as the
// BlockRunner keeps them; without the rows the statistics after the adds differ; and a source
// with the wrong number of levels is refused.
/// A small random Qwen3-VL language model (3 blocks, DeepStack inputs) and two samples of 12
/// tokens; sample 0 has DeepStack rows at tokens 3..7, sample 1 none.
struct DeepStackModel {
  std::unique_ptr<ir::Graph> g;
  std::optional<frontend::ModelSource> src;
  ir::WeightReader reader;
  std::unique_ptr<ref::Session> whole;
  int64_t hidden = 0, seq = 12;
  std::vector<std::vector<float>> embeds;
  std::vector<std::vector<std::vector<float>>> rows{2};
};

Status make_deepstack_model(const std::string& config, const std::string& dir, DeepStackModel* m) {
  frontend::RandomModelOptions o;
  o.config_path = config;
  o.output_dir = ::qbc::testing::temp_dir() / dir;
  o.seed = 3;
  o.init_std = 0.1;
  o.overrides.num_hidden_layers = 3;
  o.overrides.hidden_size = 64;
  o.overrides.intermediate_size = 96;
  o.overrides.num_attention_heads = 4;
  o.overrides.num_key_value_heads = 2;
  o.overrides.head_dim = 16;
  o.overrides.vocab_size = 256;
  o.overrides.vision.depth = 2;  // the taps [5, 11, 17] of 24 scale to [0, 1]
  o.overrides.vision.hidden_size = 32;
  o.overrides.vision.num_heads = 2;
  o.overrides.vision.intermediate_size = 64;
  o.overrides.vision.out_hidden_size = 64;
  QBC_RETURN_IF_ERROR(frontend::write_random_model(o));
  QBC_ASSIGN_OR_RETURN(frontend::ModelSource src, frontend::ModelSource::open(o.output_dir));
  m->src.emplace(std::move(src));
  frontend::ImportOptions io;
  io.max_cache_length = 64;
  QBC_ASSIGN_OR_RETURN(ir::Graph g, frontend::build_decoder_graph(m->src->hparams(), io));
  m->g = std::make_unique<ir::Graph>(std::move(g));
  m->reader = frontend::model_weight_reader(*m->src);
  QBC_ASSIGN_OR_RETURN(m->whole, ref::Session::create(*m->g, m->reader));
  m->hidden = m->whole->hidden_size();
  for (size_t i = 0; i < 2; ++i) {
    std::vector<int32_t> ids = ::qbc::testing::transform_test_ids(256, m->seq);
    for (int32_t& id : ids) id = static_cast<int32_t>((id + 31 * i) % 256);
    std::vector<float> e;
    QBC_RETURN_IF_ERROR(m->whole->embed(ids, &e));
    m->embeds.push_back(e);
  }
  for (int level = 0; level < 2; ++level) {  // sample 0: an "image" at rows 3..7
    std::vector<float> v(static_cast<size_t>(m->seq * m->hidden), 0.0f);
    for (int64_t t = 3; t < 8; ++t)
      for (int64_t c = 0; c < m->hidden; ++c)
        v[static_cast<size_t>(t * m->hidden + c)] = numerics::round_fp16(
            0.5 * std::sin(0.37 * static_cast<double>(t * m->hidden + c) + level));
    m->rows[0].push_back(std::move(v));
  }
  return ok_status();
}

TEST(BlockwiseCalibrationDeepStack, RowsReachTheirBlocksAsInTheWholeModel) {
  QBC_REQUIRE_SHARED(config, "model-configs-new/Qwen3-VL-4B-Instruct/config.json");
  DeepStackModel m;
  QBC_ASSERT_OK(make_deepstack_model(config, "qwen3_vl_deepstack", &m));
  const ir::Graph* g = m.g.get();
  const ir::WeightReader& reader = m.reader;
  std::unique_ptr<ref::Session>* whole = &m.whole;
  const int64_t seq = m.seq;
  std::vector<std::vector<float>>& embeds = m.embeds;
  std::vector<std::vector<std::vector<float>>>& rows = m.rows;
  SampleSource samples = [&](size_t i, std::vector<float>* out, int64_t* s) {
    *out = embeds[i];
    *s = seq;
    return ok_status();
  };
  DeepStackSource deepstack = [&](size_t i, int64_t s, std::vector<std::vector<float>>* out) {
    EXPECT_EQ(s, seq);
    *out = rows[i];
    return ok_status();
  };
  auto with = collect_stats_blockwise(*g, reader, 2, samples, 0, {}, nullptr, &deepstack);
  QBC_ASSERT_OK(with);
  auto without = collect_stats_blockwise(*g, reader, 2, samples, 0);
  QBC_ASSERT_OK(without);

  // The whole model with the same rows.
  std::map<std::string, float> absmax;
  (*whole)->set_keep_activations(true);
  std::vector<float> logits, act;
  std::vector<int64_t> shape;
  for (size_t i = 0; i < 2; ++i) {
    (*whole)->reset();
    if (!rows[i].empty()) QBC_ASSERT_OK((*whole)->set_deepstack(rows[i]));
    QBC_ASSERT_OK((*whole)->forward_embeds(embeds[i], seq, &logits));
    for (const auto& [name, st] : *with) {
      QBC_ASSERT_OK((*whole)->activation(name, &act, &shape));
      for (float x : act) absmax[name] = std::max(absmax[name], std::fabs(x));
    }
  }
  int differ = 0;
  for (const auto& [name, st] : *with) {
    EXPECT_NEAR(st.absmax, absmax[name], 1e-5 * absmax[name] + 1e-7) << name;
    if (std::fabs(st.absmax - without->at(name).absmax) > 1e-4 * st.absmax) ++differ;
  }
  EXPECT_GT(differ, 0) << "the DeepStack rows changed no statistic";

  DeepStackSource one_level = [&](size_t, int64_t, std::vector<std::vector<float>>* out) {
    *out = {rows[0][0]};
    return ok_status();
  };
  auto bad = collect_stats_blockwise(*g, reader, 2, samples, 0, {}, nullptr, &one_level);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(::qbc::testing::contains(bad.status().message(), "1 DeepStack levels"))
      << bad.status().to_string();
}

/// A BlockRunner over the model's two samples with their DeepStack rows (create copies them).
StatusOr<BlockRunner> runner_of(const DeepStackModel& m) {
  SampleSource samples = [&m](size_t i, std::vector<float>* out, int64_t* s) {
    *out = m.embeds[i];
    *s = m.seq;
    return ok_status();
  };
  DeepStackSource deepstack = [&m](size_t i, int64_t, std::vector<std::vector<float>>* out) {
    *out = m.rows[i];
    return ok_status();
  };
  return BlockRunner::create(*m.g, 2, samples, {}, &deepstack);
}

// BlockRunner::run_prefix runs only what computes the nodes asked for: their values (and
// their ancestors') are those of the whole segment's run, bit for bit, with DeepStack rows fed
// to a prefix that does not read them; a later node is not computed; an unknown node is
// refused by name.
TEST(BlockRunnerPrefix, ComputesTheAskedNodesAsTheWholeSegment) {
  QBC_REQUIRE_SHARED(config, "model-configs-new/Qwen3-VL-4B-Instruct/config.json");
  DeepStackModel m;
  QBC_ASSERT_OK(make_deepstack_model(config, "qwen3_vl_prefix", &m));
  auto runner = runner_of(m);
  QBC_ASSERT_OK(runner);
  ASSERT_GE(runner->num_segments(), 3u);
  Status bad = runner->run_prefix(0, {"no.such.node"}, m.reader, nullptr);
  EXPECT_EQ(bad.code(), Code::kNotFound);
  EXPECT_TRUE(::qbc::testing::contains(bad.message(), "no.such.node")) << bad.to_string();
  std::vector<int64_t> shape;
  using Kept = std::map<std::pair<size_t, std::string>, std::vector<float>>;
  auto keep = [&shape](Kept& into, const std::vector<std::string>& names) {
    return [&into, &shape, names](size_t i, ref::Session& s) -> Status {
      for (const std::string& n : names)
        QBC_RETURN_IF_ERROR(s.activation(n, &into[{i, n}], &shape));
      return ok_status();
    };
  };
  // Blocks 0 and 1 (the second on the stream the first made): GPTQ's first group's input
  // alone (the block's norm), and its last group's input with the residual stream its
  // linear adds to (everything but the last linear and what follows it).
  for (size_t s = 0; s < 2; ++s) {
    const ir::Graph& seg = runner->segment(s);
    std::vector<ir::ValueId> linears;
    std::string last_node;
    for (ir::ValueId id = 0; id < static_cast<ir::ValueId>(seg.nodes().size()); ++id) {
      if (seg.node(id).op == ir::Op::kLinear) linears.push_back(id);
      if (seg.node(id).op != ir::Op::kInput) last_node = seg.node(id).name;
    }
    ASSERT_GE(linears.size(), 2u) << "segment " << s;
    const ir::ValueId down = linears.back();
    const std::string first_input = seg.node(seg.node(linears.front()).operands[0].value).name;
    const std::string down_input = seg.node(seg.node(down).operands[0].value).name;
    std::string residual;  // the other operand of the add that takes the last linear's output
    for (const ir::Node& n : seg.nodes()) {
      if (n.op != ir::Op::kAdd) continue;
      bool reads = false;
      for (const ir::Operand& o : n.operands) reads = reads || (!o.is_weight() && o.value == down);
      for (const ir::Operand& o : n.operands)
        if (reads && !o.is_weight() && o.value != down) residual = seg.node(o.value).name;
    }
    ASSERT_FALSE(residual.empty()) << "segment " << s;
    Kept full;
    QBC_ASSERT_OK(runner->run(s, m.reader, keep(full, {first_input, down_input, residual})));
    for (const std::vector<std::string>& asked :
         {std::vector<std::string>{first_input}, std::vector<std::string>{down_input, residual}}) {
      Kept part;
      bool later_missing = true;
      QBC_ASSERT_OK(runner->run_prefix(s, asked, m.reader, [&](size_t i, ref::Session& ses) {
        QBC_RETURN_IF_ERROR(keep(part, asked)(i, ses));
        std::vector<float> v;
        later_missing = later_missing && !ses.activation(last_node, &v, &shape).ok();
        return ok_status();
      }));
      EXPECT_TRUE(later_missing) << last_node << " was computed by the prefix run";
      for (size_t i = 0; i < 2; ++i) {
        for (const std::string& n : asked) {
          const std::vector<float>& x = full[{i, n}];
          const std::vector<float>& y = part[{i, n}];
          ASSERT_EQ(x.size(), y.size()) << n;
          ASSERT_FALSE(x.empty()) << n;
          EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0)
              << "segment " << s << ", sample " << i << ", " << n;
        }
      }
    }
    QBC_ASSERT_OK(runner->advance(s, m.reader));
  }
}

// advance_from_last_run gives the next segment the stream advance() would (the same weights:
// bit for bit), and only from outputs its own segment kept: outputs kept for an earlier
// segment that advance() moved past are refused, not reused.
TEST(BlockRunnerKeep, AdvancesFromItsOwnSegmentsOutputsOnly) {
  QBC_REQUIRE_SHARED(config, "model-configs-new/Qwen3-VL-4B-Instruct/config.json");
  DeepStackModel m;
  QBC_ASSERT_OK(make_deepstack_model(config, "qwen3_vl_keep", &m));
  auto kept = runner_of(m);
  auto rerun = runner_of(m);
  QBC_ASSERT_OK(kept);
  QBC_ASSERT_OK(rerun);
  ASSERT_GE(kept->num_segments(), 4u);  // segment 2 is not the head: it has a next segment
  QBC_ASSERT_OK(kept->run(0, m.reader, nullptr, /*keep_outputs=*/true));
  QBC_ASSERT_OK(kept->advance_from_last_run(0));
  QBC_ASSERT_OK(rerun->advance(0, m.reader));
  ASSERT_EQ(kept->stream().size(), rerun->stream().size());
  for (size_t i = 0; i < kept->stream().size(); ++i) {
    const std::vector<float>& a = kept->stream()[i];
    const std::vector<float>& b = rerun->stream()[i];
    ASSERT_EQ(a.size(), b.size());
    ASSERT_FALSE(a.empty());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << "sample " << i;
  }
  // Segment 1 keeps its outputs, then advances by running again: segment 2 has none.
  QBC_ASSERT_OK(kept->run(1, m.reader, nullptr, /*keep_outputs=*/true));
  QBC_ASSERT_OK(kept->advance(1, m.reader));
  Status stale = kept->advance_from_last_run(2);
  EXPECT_EQ(stale.code(), Code::kInternal) << stale.to_string();
  EXPECT_TRUE(::qbc::testing::contains(stale.message(), "no kept outputs")) << stale.to_string();
}

}  // namespace
}  // namespace qbc::quant
