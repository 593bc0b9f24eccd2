// One test per validation error: each asserts exit-code class (kInvalidArgument
// or kNotFound) and that the message names the key and where it came from.
#include <gtest/gtest.h>

#include "config_test_util.h"

namespace qbc::config {
namespace {

using ::qbc::testing::config_file;
using ::qbc::testing::resolve_yaml;

// Expects `r` to fail with a message containing every one of `parts`.
template <typename R>
void expect_error(const R& r, std::initializer_list<const char*> parts, Code code = Code::kInvalidArgument) {
  ASSERT_FALSE(r.ok()) << "expected an error";
  EXPECT_EQ(r.status().code(), code) << r.status().message();
  for (const char* p : parts) {
    EXPECT_NE(r.status().message().find(p), std::string::npos)
        << "message lacks '" << p << "': " << r.status().message();
  }
}

TEST(ConfigValidate, UnknownKeySuggestsClosest) {
  expect_error(resolve_yaml("llm:\n  attributes:\n    maxSequenceLenght: 8192\n"),
               {"cfg.yaml:3:5", "llm.attributes.maxSequenceLenght", "did you mean 'maxSequenceLength'"});
}

TEST(ConfigValidate, UnknownKeyInWrongSectionPointsToItsSection) {
  expect_error(resolve_yaml("maxSequenceLength: 10\n"),
               {"cfg.yaml:1:1", "llm.attributes.maxSequenceLength"});
}

TEST(ConfigValidate, UnknownKeyFromSet) {
  expect_error(resolve_yaml("", {"calibration.mdoe=1"}), {"--set calibration.mdoe=1", "did you mean 'mode'"});
}

TEST(ConfigValidate, WrongTypes) {
  expect_error(resolve_yaml("seed: abc\n"), {"cfg.yaml:1:7", "seed", "expected int", "'abc'"});
  expect_error(resolve_yaml("llm:\n  apply: 3\n"), {"cfg.yaml:2:10", "llm.apply", "expected bool"});
  expect_error(resolve_yaml("splitBlocks: 4\n"), {"cfg.yaml:1:14", "splitBlocks", "expected list of int"});
  expect_error(resolve_yaml("llm: 5\n"), {"cfg.yaml:1:6", "llm", "expected section"});
  expect_error(resolve_yaml("seed: \"7\"\n"), {"seed", "expected int"});
  expect_error(resolve_yaml("calibration:\n  numSamples: 4294967296\n"),
               {"cfg.yaml:2:15", "calibration.numSamples", "32-bit"});
  expect_error(resolve_yaml("llm:\n  apply:\n"), {"cfg.yaml:2", "llm.apply", "got nothing"});
}

TEST(ConfigValidate, BitsOutOfRange) {
  expect_error(resolve_yaml("bit:\n  transformer:\n    weight:\n      ffn: 3\n"),
               {"cfg.yaml:4:12", "bit.transformer.weight.ffn", "out of range", "4 | 8"});
  expect_error(resolve_yaml("bit:\n  kvCache:\n    key: 2\n"), {"bit.kvCache.key", "4 | 8 | 16"});
  expect_error(resolve_yaml("bit:\n  transformer:\n    activation:\n      query: 4\n"),
               {"bit.transformer.activation.query", "8 | 16"});
}

// bit.prefill / bit.decode: one phase at most gets its own weight image, a group size needs
// the image, and the widths are 4 or 8.
TEST(ConfigValidate, PhaseWeightImages) {
  expect_error(resolve_yaml("bit:\n  prefill:\n    weight: 8\n  decode:\n    weight: 4\n"),
               {"cfg.yaml:5", "bit.decode.weight", "bit.prefill.weight 8", "cfg.yaml:3",
                "one phase at most"});
  expect_error(resolve_yaml("", {"bit.decode.weightGroupSize=32"}),
               {"bit.decode.weightGroupSize", "without bit.decode.weight"});
  expect_error(resolve_yaml("bit:\n  decode:\n    weight: 2\n"),
               {"cfg.yaml:3", "bit.decode.weight", "0 | 4 | 8"});
  auto ok = resolve_yaml("bit:\n  decode:\n    weight: 4\n    weightGroupSize: 32\n");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->options.bit().decode().weight(), 4);
  EXPECT_EQ(ok->options.bit().prefill().weight(), 0);
  EXPECT_EQ(ok->options.bit().prefill().weight_group_size(), -1);
}

TEST(ConfigValidate, LengthsMustBePositive) {
  expect_error(resolve_yaml("llm:\n  attributes:\n    maxSequenceLength: 0\n"),
               {"cfg.yaml:3:24", "llm.attributes.maxSequenceLength", "out of range", ">= 1"});
  expect_error(resolve_yaml("calibration:\n  maxPercentile:\n    percentile: 0\n"),
               {"calibration.maxPercentile.percentile", "> 0.0 .. 1.0"});
}

TEST(ConfigValidate, CacheShorterThanSequence) {
  expect_error(resolve_yaml("llm:\n  attributes:\n    maxCacheLength: 1024\n", {}, "llm"),
               {"cfg.yaml:3:21", "llm.attributes.maxCacheLength", "smaller than",
                "configs/presets/llm.yaml"});
}

TEST(ConfigValidate, SplitBlocksNotIncreasing) {
  expect_error(resolve_yaml("splitBlocks: [8, 8, 16]\n"), {"cfg.yaml:1:14", "splitBlocks", "strictly increasing"});
  expect_error(resolve_yaml("splitBlocks: [0, 8]\n"), {"splitBlocks", "positive"});
}

TEST(ConfigValidate, SplitBlocksWithSplitParts) {
  expect_error(resolve_yaml("splitBlocks: [8, 16]\nsplitParts: 2\n"),
               {"cfg.yaml:2:13", "splitParts", "cannot be combined with splitBlocks", "cfg.yaml:1:14"});
}

TEST(ConfigValidate, BatchWithExplicitNonSingleScheme) {
  expect_error(resolve_yaml("inferenceScheme: global4\nllm:\n  attributes:\n    runtime:\n      batchSize: 4\n"),
               {"cfg.yaml:1:18", "inferenceScheme", "global4", "batchSize 4", "single"});
}

TEST(ConfigValidate, BatchWithUnsetSchemeBecomesSingleAndSaysSo) {
  auto c = resolve_yaml("llm:\n  attributes:\n    runtime:\n      batchSize: 4\n");
  QBC_ASSERT_OK(c);
  EXPECT_EQ(c->options.inference_scheme(), INFERENCE_SCHEME_SINGLE);
  ASSERT_EQ(c->notes.size(), 1u);
  EXPECT_NE(c->notes[0].find("inferenceScheme set to 'single'"), std::string::npos);
}

TEST(ConfigValidate, MultiCoreSchemeOnSingleCoreTarget) {
  expect_error(resolve_yaml("targetDevice: regulus-rb\ninferenceScheme: multi\n"),
               {"cfg.yaml:2:18", "inferenceScheme", "'multi' needs 4 cores", "regulus-rb", "1 core"});
  expect_error(resolve_yaml("inferenceScheme: global8\ntargetProfile: test-2core\n"),
               {"'global8' needs 8 cores", "test-2core"});
}

TEST(ConfigValidate, MalformedYamlHasLineAndColumn) {
  expect_error(resolve_yaml("llm:\n  apply: [true\nseed: 1\n"), {"cfg.yaml:", "malformed YAML"});
  auto r = resolve_yaml("llm:\n  apply: true\n    seed: 1\n");
  expect_error(r, {"cfg.yaml:3:", "malformed YAML"});
}

TEST(ConfigValidate, MalformedJsonHasLineAndColumn) {
  LoadRequest req;
  req.files.push_back(config_file("{\n  \"llm\": {\"apply\": true,}\n}\n", "bad.json"));
  expect_error(resolve(req), {"bad.json:2:", "malformed JSON"});
}

TEST(ConfigValidate, DuplicateKey) {
  expect_error(resolve_yaml("seed: 1\nseed: 2\n"), {"cfg.yaml:2:1", "seed", "twice"});
  expect_error(resolve_yaml("equivalentTransformation:\n  qk: {apply: true}\n  QK: {apply: false}\n"),
               {"cfg.yaml:3:3", "equivalentTransformation.qk", "twice"});
}

TEST(ConfigValidate, UnknownEnumSpelling) {
  expect_error(resolve_yaml("inferenceScheme: global5\n"),
               {"cfg.yaml:1:18", "inferenceScheme", "single | multi | global4 | global8 | all",
                "did you mean"});
  expect_error(resolve_yaml("targetDevice: aries\n"), {"targetDevice", "aries-rb | regulus-rb"});
}

TEST(ConfigValidate, UnknownPresetAndMissingFile) {
  expect_error(resolve_yaml("", {}, "llm_fastest"), {"unknown preset 'llm_fastest'", "llm_fast"},
               Code::kNotFound);
  LoadRequest req;
  req.files.push_back("/nonexistent/qbc.yaml");
  expect_error(resolve(req), {"/nonexistent/qbc.yaml", "not found"}, Code::kNotFound);
  expect_error(resolve_yaml("targetProfile: nosuch\n"), {"targetProfile", "unknown target profile 'nosuch'",
                                                         "aries-rb"}, Code::kNotFound);
}

TEST(ConfigValidate, NpuCoreIdsMustExistOnTarget) {
  expect_error(resolve_yaml("llm:\n  attributes:\n    runtime:\n      npuCoreIds: [\"0:1\", \"2:0\"]\n"),
               {"cfg.yaml:4:19", "npuCoreIds", "'2:0'", "cluster < 2"});
  expect_error(resolve_yaml("llm:\n  attributes:\n    runtime:\n      npuCoreIds: [\"0:1\", \"0:1\"]\n"),
               {"npuCoreIds", "twice"});
  QBC_ASSERT_OK(resolve_yaml("llm:\n  attributes:\n    runtime:\n      npuCoreIds: [\"1:3\"]\n"));
}

TEST(ConfigValidate, RandomCalibWithPaths) {
  expect_error(resolve_yaml("useRandomCalib: true\ncalibDataPaths: [x]\n"),
               {"cfg.yaml:1:17", "useRandomCalib", "calibDataPaths"});
}

TEST(ConfigValidate, MalformedSet) {
  expect_error(resolve_yaml("", {"seed"}), {"--set seed", "key.path=value"});
  expect_error(resolve_yaml("", {"seed="}), {"--set seed=", "no value"});
  expect_error(resolve_yaml("", {"llm..apply=true"}), {"malformed key path"});
}

TEST(ConfigValidate, TopLevelMustBeMapping) {
  expect_error(resolve_yaml("- a\n- b\n"), {"cfg.yaml:1:1", "top level", "expected a mapping"});
}

}  // namespace
}  // namespace qbc::config
