// The preset's 4-bit weight quantizer (configs/presets/llm.yaml `fourBitWeights`,
// src/config/four_bit_rule.cpp): applied only with 4-bit weights, only to keys the user left
// alone, with the preset file's line as the origin; never to a preset without the section.
#include <gtest/gtest.h>

#include "config_test_util.h"
#include "qbc/config/presets.h"

namespace qbc::config {
namespace {

using ::qbc::testing::resolve_yaml;

bool mentions(const std::vector<std::string>& notes, const std::string& what) {
  for (const std::string& n : notes)
    if (n.find(what) != std::string::npos) return true;
  return false;
}

TEST(FourBitRule, EightBitWeightsKeepThePresetAsItIs) {
  auto cfg = resolve_yaml("", {}, "llm");
  QBC_ASSERT_OK(cfg);
  EXPECT_FALSE(has_four_bit_weights(cfg->options));
  EXPECT_EQ(cfg->options.bit().weight_group_size(), 0);
  EXPECT_FALSE(cfg->options.bit().weight_zero_point());
  EXPECT_FALSE(cfg->options.hessian_quant().apply());
  EXPECT_FALSE(mentions(cfg->notes, "4-bit weight quantizer"));
  EXPECT_EQ(cfg->origins.at("bit.weightGroupSize").source, "default");
}

TEST(FourBitRule, FourBitWeightsGetTheQuantizerWithThePresetLineAsOrigin) {
  for (const char* key : {"ffn", "query", "head"}) {
    SCOPED_TRACE(key);
    auto cfg = resolve_yaml("", {std::string("bit.transformer.weight.") + key + "=4"}, "llm");
    QBC_ASSERT_OK(cfg);
    EXPECT_TRUE(has_four_bit_weights(cfg->options));
    EXPECT_EQ(cfg->options.bit().weight_group_size(), 32);
    EXPECT_TRUE(cfg->options.bit().weight_zero_point());
    EXPECT_TRUE(cfg->options.hessian_quant().apply());
    EXPECT_TRUE(cfg->options.hessian_quant().attributes().float_target());
    const Origin& o = cfg->origins.at("bit.weightGroupSize");
    EXPECT_EQ(o.source, "configs/presets/llm.yaml");
    EXPECT_GT(o.line, 0);
    EXPECT_FALSE(set_by_user(*cfg, "bit.weightGroupSize"));
    EXPECT_TRUE(mentions(cfg->notes, "bit.weightGroupSize 32"))
        << ::testing::PrintToString(cfg->notes);
  }
}

TEST(FourBitRule, TheUsersOwnKeysWinInEveryLayer) {
  // A --set, and a config file that also sets the bits.
  auto set = resolve_yaml("", {"bit.transformer.weight.ffn=4", "bit.weightGroupSize=0"}, "llm");
  QBC_ASSERT_OK(set);
  EXPECT_EQ(set->options.bit().weight_group_size(), 0);
  EXPECT_TRUE(set->options.bit().weight_zero_point());  // the keys not set still follow the rule
  auto file = resolve_yaml(
      "bit:\n  weightGroupSize: 64\n  transformer:\n    weight:\n      ffn: 4\n"
      "hessianQuant:\n  apply: false\n",
      {}, "llm");
  QBC_ASSERT_OK(file);
  EXPECT_EQ(file->options.bit().weight_group_size(), 64);
  EXPECT_FALSE(file->options.hessian_quant().apply());
  EXPECT_TRUE(file->options.bit().weight_zero_point());
  // Everything set by the user: nothing to add, no note.
  auto all = resolve_yaml(
      "",
      {"bit.transformer.weight.ffn=4", "bit.weightGroupSize=32", "bit.weightZeroPoint=false",
       "hessianQuant.apply=false", "hessianQuant.attributes.floatTarget=false"},
      "llm");
  QBC_ASSERT_OK(all);
  EXPECT_FALSE(all->options.bit().weight_zero_point());
  EXPECT_FALSE(mentions(all->notes, "4-bit weight quantizer"));
}

TEST(FourBitRule, OnlyPresetsWithTheSectionHaveTheRule) {
  for (const char* preset : {"llm_fast", "multimodal", ""}) {
    SCOPED_TRACE(preset);
    auto cfg = resolve_yaml("", {"bit.transformer.weight.ffn=4"}, preset);
    QBC_ASSERT_OK(cfg);
    EXPECT_EQ(cfg->options.bit().weight_group_size(), 0);
    EXPECT_FALSE(cfg->options.hessian_quant().apply());
  }
}

TEST(FourBitRule, ApplyingAfterResolveSetsOnceThenNothing) {
  // What the bits-by-budget stage does: the bits change after resolve().
  auto cfg = resolve_yaml("", {}, "llm");
  QBC_ASSERT_OK(cfg);
  cfg->options.mutable_bit()->mutable_transformer()->mutable_weight()->set_output(4);
  auto first = apply_four_bit_rule(*cfg);
  QBC_ASSERT_OK(first);
  EXPECT_EQ(first->size(), 4u) << ::testing::PrintToString(*first);
  EXPECT_EQ(cfg->options.bit().weight_group_size(), 32);
  auto second = apply_four_bit_rule(*cfg);
  QBC_ASSERT_OK(second);
  EXPECT_TRUE(second->empty());
  // Resolving the 4-bit bits directly gives the same options.
  auto direct = resolve_yaml("", {"bit.transformer.weight.output=4"}, "llm");
  QBC_ASSERT_OK(direct);
  EXPECT_EQ(to_yaml(direct->options), to_yaml(cfg->options));
}

TEST(FourBitRule, TheSectionIsNotAConfigurationKey) {
  // A user file may not use it: it belongs to preset files.
  auto cfg = resolve_yaml("fourBitWeights:\n  bit:\n    weightGroupSize: 32\n");
  EXPECT_FALSE(cfg.ok());
  // The built-in llm preset holds it, and resolving the preset strips it before the keys are
  // applied (an unknown key would be refused).
  auto preset = find_preset("llm");
  QBC_ASSERT_OK(preset);
  EXPECT_NE(preset->text.find("fourBitWeights:"), std::string::npos);
  QBC_ASSERT_OK(resolve_yaml("", {}, "llm"));
}

}  // namespace
}  // namespace qbc::config
