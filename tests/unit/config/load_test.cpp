// Loading, round trips and precedence of the configuration layers.
#include <gtest/gtest.h>

#include "config_test_util.h"
#include "qbc/config/presets.h"

namespace qbc::config {
namespace {

using ::qbc::testing::config_file;
using ::qbc::testing::resolve_yaml;

TEST(ConfigLoad, DefaultsMatchSchemaAnnotations) {
  auto cfg = resolve_yaml("");
  QBC_ASSERT_OK(cfg);
  const CompileOptions& o = cfg->options;
  EXPECT_EQ(o.target_device(), TARGET_DEVICE_ARIES_RB);
  EXPECT_EQ(o.inference_scheme(), INFERENCE_SCHEME_SINGLE);
  EXPECT_FALSE(o.llm().apply());
  EXPECT_EQ(o.llm().attributes().max_sequence_length(), 4096);
  EXPECT_EQ(o.bit().transformer().weight().head(), 8);
  EXPECT_EQ(o.bit().kv_cache().key(), 8);
  EXPECT_DOUBLE_EQ(o.calibration().max_percentile().percentile(), 0.9999);
  EXPECT_EQ(o.target().name(), "aries-rb");
  EXPECT_EQ(o.target().clusters() * o.target().cores_per_cluster(), 8);
  EXPECT_EQ(cfg->origins.at("llm.apply").source, "default");
}

TEST(ConfigLoad, YamlRoundTrip) {
  auto a = resolve_yaml("llm:\n  apply: true\nsplitBlocks: [2, 5]\nbit:\n  layerOverrides:\n"
                        "    activation16Bits: [\"blk.*.ffn.down_proj\"]\n",
                        {}, "llm");
  QBC_ASSERT_OK(a);
  const std::string yaml = to_yaml(a->options);
  auto b = resolve_yaml(yaml);
  QBC_ASSERT_OK(b);
  EXPECT_EQ(to_yaml(b->options), yaml);
  EXPECT_TRUE(b->options.SerializeAsString() == a->options.SerializeAsString());
}

TEST(ConfigLoad, JsonRoundTripAndEquivalenceWithYaml) {
  auto a = resolve_yaml("", {"splitParts=3", "bit.transformer.weight.ffn=4"}, "llm");
  QBC_ASSERT_OK(a);
  const std::string json = to_json(a->options);
  LoadRequest req;
  req.files.push_back(config_file(json, "dumped.json"));
  auto b = resolve(req);
  QBC_ASSERT_OK(b);
  EXPECT_EQ(to_json(b->options), json);
  EXPECT_EQ(to_yaml(b->options), to_yaml(a->options));
  // The same settings written by hand in both syntaxes give the same config.
  auto y = resolve_yaml("llm: {apply: true}\nseed: 7\ncalibDataPaths: [a, b]\n");
  LoadRequest jr;
  jr.files.push_back(config_file(R"({"llm": {"apply": true}, "seed": 7, "calibDataPaths": ["a", "b"]})",
                                 "same.json"));
  auto j = resolve(jr);
  QBC_ASSERT_OK(y);
  QBC_ASSERT_OK(j);
  EXPECT_EQ(to_yaml(y->options), to_yaml(j->options));
}

TEST(ConfigLoad, EveryPresetResolvesAndRoundTrips) {
  ASSERT_EQ(presets().size(), 3u);
  for (const Preset& p : presets()) {
    SCOPED_TRACE(p.name);
    EXPECT_FALSE(p.description.empty());
    auto cfg = resolve_yaml("", {}, p.name);
    QBC_ASSERT_OK(cfg);
    auto again = resolve_yaml(to_yaml(cfg->options));
    QBC_ASSERT_OK(again);
    EXPECT_EQ(to_yaml(again->options), to_yaml(cfg->options));
  }
}

TEST(ConfigLoad, PresetMeanings) {
  auto llm = resolve_yaml("", {}, "llm");
  auto fast = resolve_yaml("", {}, "llm_fast");
  auto mm = resolve_yaml("", {}, "multimodal");
  QBC_ASSERT_OK(llm);
  QBC_ASSERT_OK(fast);
  QBC_ASSERT_OK(mm);
  const auto& et = llm->options.equivalent_transformation();
  for (bool on : {et.qk().apply(), et.ud().apply(), et.vo().apply(), et.spin_r1().apply(),
                  et.spin_r2().apply(), et.optimize_ffn().apply()}) {
    EXPECT_TRUE(on);
  }
  EXPECT_TRUE(llm->options.llm().attributes().calibration().use_full_seq_length());
  EXPECT_EQ(llm->options.llm().attributes().max_cache_length(), 4096);
  const auto& fet = fast->options.equivalent_transformation();
  for (bool on : {fet.qk().apply(), fet.ud().apply(), fet.vo().apply(), fet.spin_r1().apply(),
                  fet.spin_r2().apply(), fet.optimize_ffn().apply()}) {
    EXPECT_FALSE(on);
  }
  EXPECT_FALSE(fast->options.llm().attributes().calibration().use_full_seq_length());
  EXPECT_TRUE(fast->options.llm().apply());
  EXPECT_EQ(mm->options.calibration().method(), 3);
  EXPECT_TRUE(mm->options.llm().apply());
  EXPECT_FALSE(llm->options.hessian_quant().apply());
  // llm measures the rotation before committing to it, and searches weight scales.
  EXPECT_EQ(et.spin_r1().policy(), config::ROTATION_POLICY_IF_BETTER);
  EXPECT_TRUE(llm->options.search_weight_scale().apply());
  EXPECT_FALSE(fast->options.search_weight_scale().apply());
}

// Each layer overrides the one below it, and origins name the winning layer.
TEST(ConfigPrecedence, EveryLayerInOrder) {
  const std::string key = "llm.attributes.maxSequenceLength";
  // preset sets 4096 (default also 4096) -> preset origin.
  auto p = resolve_yaml("", {}, "llm");
  QBC_ASSERT_OK(p);
  EXPECT_NE(p->origins.at(key).source.find("configs/presets/llm.yaml"), std::string::npos);
  // file over preset
  auto f = resolve_yaml("llm:\n  attributes:\n    maxSequenceLength: 2048\n", {}, "llm");
  QBC_ASSERT_OK(f);
  EXPECT_EQ(f->options.llm().attributes().max_sequence_length(), 2048);
  EXPECT_EQ(f->origins.at(key).line, 3);
  EXPECT_TRUE(f->options.equivalent_transformation().qk().apply());  // file refines the preset
  // later file over earlier file
  LoadRequest two;
  two.preset = "llm";
  two.files = {config_file("seed: 1\n", "one.yaml"), config_file("seed: 2\n", "two.yaml")};
  auto t = resolve(two);
  QBC_ASSERT_OK(t);
  EXPECT_EQ(t->options.seed(), 2);
  EXPECT_NE(t->origins.at("seed").source.find("two.yaml"), std::string::npos);
  // --set over file, later --set over earlier
  two.sets = {"seed=3", "seed=4"};
  auto s = resolve(two);
  QBC_ASSERT_OK(s);
  EXPECT_EQ(s->options.seed(), 4);
  EXPECT_EQ(s->origins.at("seed").source, "--set seed=4");
  // flag over --set
  two.flags.push_back({"seed", "5", "--seed"});
  auto fl = resolve(two);
  QBC_ASSERT_OK(fl);
  EXPECT_EQ(fl->options.seed(), 5);
  EXPECT_EQ(fl->origins.at("seed").source, "--seed");
  // target profile over defaults, user keys over the profile
  auto tp = resolve_yaml("target:\n  sramBytesPerCore: 1024\n");
  QBC_ASSERT_OK(tp);
  EXPECT_EQ(tp->options.target().sram_bytes_per_core(), 1024);
  EXPECT_EQ(tp->options.target().dram_bytes(), 17179869184LL);
  EXPECT_NE(tp->origins.at("target.dramBytes").source.find("configs/targets/aries-rb.yaml"),
            std::string::npos);
}

TEST(ConfigPrecedence, ListsReplaceWhole) {
  auto c = resolve_yaml("splitBlocks: [1, 2, 3]\n", {"splitBlocks=[4]"});
  QBC_ASSERT_OK(c);
  ASSERT_EQ(c->options.split_blocks_size(), 1);
  EXPECT_EQ(c->options.split_blocks(0), 4);
}

TEST(ConfigPrecedence, TargetProfileFollowsDeviceAndExplicitProfile) {
  auto r = resolve_yaml("targetDevice: regulus-rb\n");
  QBC_ASSERT_OK(r);
  EXPECT_EQ(r->options.target().name(), "regulus-rb");
  auto t = resolve_yaml("", {"targetProfile=test-2core"});
  QBC_ASSERT_OK(t);
  EXPECT_EQ(t->options.target().cores_per_cluster(), 2);
  EXPECT_EQ(t->options.target().sram_bytes_per_core(), 65536);
}

TEST(ConfigLoad, VendorSpellingsAreAccepted) {
  // The vendor's dump uses QK/UD/SpinR1/OptimizeFFN; snake_case is the proto spelling.
  auto c = resolve_yaml("equivalentTransformation:\n  QK: {apply: true}\n  SpinR1: {apply: true}\n"
                        "  OptimizeFFN: {apply: true}\nllm:\n  attributes:\n    max_sequence_length: 512\n"
                        "    maxCacheLength: 512\n");
  QBC_ASSERT_OK(c);
  EXPECT_TRUE(c->options.equivalent_transformation().qk().apply());
  EXPECT_TRUE(c->options.equivalent_transformation().spin_r1().apply());
  EXPECT_TRUE(c->options.equivalent_transformation().optimize_ffn().apply());
  EXPECT_EQ(c->options.llm().attributes().max_sequence_length(), 512);
}

TEST(ConfigLoad, OriginsTableNamesEveryLeaf) {
  auto c = resolve_yaml("seed: 9\n", {}, "llm");
  QBC_ASSERT_OK(c);
  const std::string table = origins_table(c->options, c->origins);
  EXPECT_NE(table.find("seed = 9"), std::string::npos);
  EXPECT_NE(table.find("cfg.yaml:1:7"), std::string::npos);
  EXPECT_NE(table.find("llm.apply = true"), std::string::npos);
  EXPECT_NE(table.find("bit.kvCache.value = 8  "), std::string::npos);
}

}  // namespace
}  // namespace qbc::config
