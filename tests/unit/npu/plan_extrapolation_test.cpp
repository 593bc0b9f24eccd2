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

// A shared config with its vocabulary set to `vocab` ids, planned (llm_fast, 2K context, the
// configured scheme only) with or without extrapolation.
StatusOr<driver::PlanResult> plan_vocab(const std::string& model, int64_t vocab, bool extrapolate) {
  config::LoadRequest req;
  req.preset = "llm_fast";
  req.sets = {"llm.attributes.maxSequenceLength=2048", "llm.attributes.maxCacheLength=2048",
              "inferenceScheme=single"};
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, config::resolve(req));
  QBC_ASSIGN_OR_RETURN(frontend::HParams hp,
                       driver::shape_hparams((shared_dir() / "model-configs" / model).string()));
  hp.vocab_size = vocab;
  QBC_ASSIGN_OR_RETURN(ir::Graph g, driver::shape_graph(hp, cfg));
  driver::PlanOptions po;
  if (extrapolate) po.hparams = &hp;
  return driver::plan(g, cfg, po);
}

// Outside mutation finding 2: a vocabulary of millions made plan lower the head whole for
// every scheme (10-20 s, 0.8 GB). From 2^20 ids it is sampled at two small vocabularies a
// step of 65,536 apart with the model's ragged last tile, and the answer is the whole one.
TEST(PlanExtrapolationRules, ALargeVocabularyIsSampledAndEqualsTimingItWhole) {
  QBC_REQUIRE_SHARED(dir, "model-configs/SmolLM2-135M-Instruct");
  const int64_t vocab = (int64_t{1} << 20) + 12345;
  auto whole = plan_vocab("SmolLM2-135M-Instruct", vocab, false);
  QBC_ASSERT_OK(whole);
  auto fast = plan_vocab("SmolLM2-135M-Instruct", vocab, true);
  QBC_ASSERT_OK(fast);
  EXPECT_EQ(whole->extrapolated_vocab, 0);
  EXPECT_EQ(fast->extrapolated_vocab, 65536 + 12345);
  EXPECT_EQ(fast->extrapolated_period, 1);
  expect_same_json(nlohmann::json::parse(driver::plan_json(*whole)),
                   nlohmann::json::parse(driver::plan_json(*fast)), "vocab");
}

// The same for 8.2 M ids on a Llama-3.2-1B shape: the largest program lowered is that of two
// blocks and 131,072 + (8.2 M mod 65,536) vocabulary rows, not the model's.
TEST(PlanExtrapolationRules, An8MillionVocabularyPlansFromSmallSamples) {
  QBC_REQUIRE_SHARED(dir, "model-configs/Llama-3.2-1B-Instruct");
  auto fast = plan_vocab("Llama-3.2-1B-Instruct", 8200000, true);
  QBC_ASSERT_OK(fast);
  EXPECT_EQ(fast->extrapolated_vocab, 65536 + 8200000 % 65536);
  EXPECT_EQ(fast->extrapolated_period, 1);
  for (const isa::Mode& m : fast->bundle.modes) {  // the model's own programs were not lowered
    for (const isa::CoreProgram& c : m.prefill.cores) EXPECT_TRUE(c.code.empty());
    for (const isa::CoreProgram& c : m.decode.cores) EXPECT_TRUE(c.code.empty());
  }
  ASSERT_EQ(fast->schemes.size(), 1u);
  EXPECT_GT(fast->schemes[0].prediction.decode_s, 0.0);
  // The nodes timed are those of a two-block program, as for the real 128,256-id vocabulary.
  auto real = plan_vocab("Llama-3.2-1B-Instruct", 128256, true);
  QBC_ASSERT_OK(real);
  ASSERT_EQ(real->schemes.size(), 1u);
  EXPECT_EQ(fast->schemes[0].prediction.decode.nodes.size(),
            real->schemes[0].prediction.decode.nodes.size());
  // The head's weights are the model's: 8.2 M rows of 2048 at 8 bits at least.
  EXPECT_GE(fast->memory.dram.weights, int64_t{8200000} * 2048);
}

}  // namespace
}  // namespace qbc
