// Block-by-block calibration gives the statistics of whole-model calibration, on a
// model with a prefix node (Gemma's embed_scale), post-norms and a soft-capped head,
// and on stories260K.
#include <gtest/gtest.h>

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
