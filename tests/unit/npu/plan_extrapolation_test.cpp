// `qbc plan` times one and two periods of repeating decoder blocks and extrapolates (issue 29,
// finding 2): on the shared model configs its answers are those of timing every block (the
// JSON's integers equal, its times equal to 1e-9 relative, the same bound names), for each
// scheme, including a period of two blocks (Gemma 2's alternating sliding windows); a block
// made to differ by a per-layer quantization override is either inside the two timed periods
// (then the answer is still the whole one) or the model is timed whole.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/driver/plan.h"
#include "test_support.h"

namespace qbc {
namespace {

using ::qbc::testing::shared_dir;

StatusOr<driver::PlanResult> plan_of(const std::string& model, const std::vector<std::string>& sets,
                                     bool extrapolate, frontend::HParams* hp_out = nullptr) {
  config::LoadRequest req;
  req.preset = "llm_fast";
  req.sets = sets;
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, config::resolve(req));
  QBC_ASSIGN_OR_RETURN(frontend::HParams hp,
                       driver::shape_hparams((shared_dir() / "model-configs" / model).string()));
  QBC_ASSIGN_OR_RETURN(ir::Graph g, driver::shape_graph(hp, cfg));
  driver::PlanOptions po;
  if (extrapolate) po.hparams = &hp;
  if (hp_out != nullptr) *hp_out = hp;
  return driver::plan(g, cfg, po);
}

// Every leaf of `got` equals `want`'s: integers, strings and bools exactly, doubles to 1e-9.
void expect_same_json(const nlohmann::json& want, const nlohmann::json& got,
                      const std::string& path) {
  ASSERT_EQ(want.type(), got.type()) << path;
  if (want.is_object()) {
    ASSERT_EQ(want.size(), got.size()) << path;
    for (auto it = want.begin(); it != want.end(); ++it) {
      ASSERT_TRUE(got.contains(it.key())) << path << "." << it.key();
      expect_same_json(it.value(), got[it.key()], path + "." + it.key());
    }
  } else if (want.is_array()) {
    ASSERT_EQ(want.size(), got.size()) << path;
    for (size_t i = 0; i < want.size(); ++i)
      expect_same_json(want[i], got[i], path + "[" + std::to_string(i) + "]");
  } else if (want.is_number_float()) {
    const double a = want.get<double>(), b = got.get<double>();
    EXPECT_LE(std::fabs(a - b), 1e-9 * std::max(std::fabs(a), 1e-300))
        << path << ": " << a << " vs " << b;
  } else {
    EXPECT_EQ(want, got) << path;
  }
}

struct Case {
  const char* model;
  int period;
};

class PlanExtrapolation : public ::testing::TestWithParam<Case> {};

TEST_P(PlanExtrapolation, EqualsTimingEveryBlock) {
  const Case& c = GetParam();
  QBC_REQUIRE_SHARED(dir, std::string("model-configs/") + c.model);
  const std::vector<std::string> sets = {"llm.attributes.maxSequenceLength=4096",
                                         "llm.attributes.maxCacheLength=4096"};
  auto whole = plan_of(c.model, sets, false);
  QBC_ASSERT_OK(whole);
  auto fast = plan_of(c.model, sets, true);
  QBC_ASSERT_OK(fast);
  EXPECT_EQ(whole->extrapolated_period, 0);
  EXPECT_EQ(fast->extrapolated_period, c.period);
  ASSERT_GE(fast->schemes.size(), 1u);
  expect_same_json(nlohmann::json::parse(driver::plan_json(*whole)),
                   nlohmann::json::parse(driver::plan_json(*fast)), c.model);
  EXPECT_EQ(driver::plan_text(*whole), driver::plan_text(*fast));
}

INSTANTIATE_TEST_SUITE_P(SharedConfigs, PlanExtrapolation,
                         ::testing::Values(Case{"SmolLM2-135M-Instruct", 1},
                                           Case{"Llama-3.2-1B-Instruct", 1},
                                           Case{"gemma-2-2b-it", 2}),
                         [](const auto& info) {
                           std::string n = info.param.model;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(PlanExtrapolationRules, AnOverriddenBlockIsInTheTimedPeriodsOrTheModelIsTimedWhole) {
  QBC_REQUIRE_SHARED(dir, "model-configs/SmolLM2-135M-Instruct");
  const std::vector<std::string> base = {"llm.attributes.maxSequenceLength=2048",
                                         "llm.attributes.maxCacheLength=2048",
                                         "inferenceScheme=single", "bit.transformer.weight.ffn=4"};
  auto with = [&](const std::string& block) {
    std::vector<std::string> sets = base;
    sets.push_back("bit.layerOverrides.weight8Bits=[blk." + block + ".ffn.down_proj]");
    return sets;
  };
  // 4-bit FFN weights, block 20's down projection at 8 bits: block 20 repeats no earlier one
  // at any period of at most 10 blocks, so the model is timed whole.
  auto late = plan_of("SmolLM2-135M-Instruct", with("20"), true);
  QBC_ASSERT_OK(late);
  EXPECT_EQ(late->extrapolated_period, 0);
  // Block 1 overridden: blocks repeat from the second period of 2 (blocks 2-3, 4-5, ...) and
  // the first period, which holds block 1, is in both timed programs: the whole answer.
  auto early = plan_of("SmolLM2-135M-Instruct", with("1"), true);
  QBC_ASSERT_OK(early);
  EXPECT_EQ(early->extrapolated_period, 2);
  auto whole = plan_of("SmolLM2-135M-Instruct", with("1"), false);
  QBC_ASSERT_OK(whole);
  expect_same_json(nlohmann::json::parse(driver::plan_json(*whole)),
                   nlohmann::json::parse(driver::plan_json(*early)), "early");
  // Without an override the model repeats from its second block.
  auto uniform = plan_of("SmolLM2-135M-Instruct", base, true);
  QBC_ASSERT_OK(uniform);
  EXPECT_EQ(uniform->extrapolated_period, 1);
}

}  // namespace
}  // namespace qbc
