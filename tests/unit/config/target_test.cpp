// Target profiles: every number is tagged fact or assumption with a note.
#include <gtest/gtest.h>

#include "config_test_util.h"
#include "qbc/config/target.h"

namespace qbc::config {
namespace {

TEST(TargetProfiles, BuiltinsHaveProvenanceForEveryKey) {
  const auto names = builtin_target_names();
  ASSERT_EQ(names, (std::vector<std::string>{"aries-rb", "regulus-rb", "test-2core"}));
  for (const std::string& n : names) {
    SCOPED_TRACE(n);
    auto t = load_target(n);
    QBC_ASSERT_OK(t);
    EXPECT_EQ(t->profile.name(), n);
    const auto* desc = TargetProfile::descriptor();
    for (int i = 0; i < desc->field_count(); ++i) {
      const std::string key = desc->field(i)->json_name();
      auto it = t->provenance.find(key);
      ASSERT_NE(it, t->provenance.end()) << "no provenance for " << key;
      EXPECT_NE(it->second.kind(), PROVENANCE_KIND_UNSPECIFIED) << key;
      EXPECT_FALSE(it->second.note().empty()) << key;
    }
  }
}

TEST(TargetProfiles, AriesFactsMatchVendorMaterial) {
  auto t = load_target("aries-rb");
  QBC_ASSERT_OK(t);
  EXPECT_EQ(total_cores(t->profile), 8);
  EXPECT_EQ(t->profile.clusters(), 2);
  EXPECT_EQ(t->profile.dram_bytes(), 16LL << 30);
  // 80 TOPS INT8 (fact) = 2 ops/MAC x MACs/cycle x cores x clock.
  const double tops = 2.0 * t->profile.int8_macs_per_cycle_per_core() * total_cores(t->profile) *
                      t->profile.clock_mhz() * 1e6 / 1e12;
  EXPECT_NEAR(tops, 80.0, 0.5);
  EXPECT_EQ(t->provenance.at("dramBytes").kind(), PROVENANCE_KIND_FACT);
  EXPECT_EQ(t->provenance.at("sramBytesPerCore").kind(), PROVENANCE_KIND_ASSUMPTION);
  auto r = load_target("regulus-rb");
  QBC_ASSERT_OK(r);
  EXPECT_EQ(total_cores(r->profile), 1);
}

TEST(TargetProfiles, UserFileAndErrors) {
  const std::string good = ::qbc::testing::config_file(
      "name: mine\nclusters: 1\ncoresPerCluster: 4\nprovenance:\n  clusters: {kind: fact, note: x}\n",
      "mine.yaml");
  auto t = load_target(good);
  QBC_ASSERT_OK(t);
  EXPECT_EQ(total_cores(t->profile), 4);
  const std::string bad = ::qbc::testing::config_file("name: mine\ncores: 8\n", "bad-target.yaml");
  auto b = load_target(bad);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("bad-target.yaml:2:1"), std::string::npos) << b.status().message();
  EXPECT_NE(b.status().message().find("unknown key 'cores'"), std::string::npos);
  auto missing = load_target("/no/such/target.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace qbc::config
