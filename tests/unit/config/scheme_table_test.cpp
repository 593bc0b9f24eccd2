// The inference-scheme table (qbc/isa/schemes.def): every scheme round-trips name <-> enum,
// and the lists the configuration, the runtime and the CLI accept are that table.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "qbc/config/config.h"
#include "qbc/isa/scheme.h"
#include "qbc/runtime/model.h"

namespace qbc {
namespace {

TEST(SchemeTable, EveryRowRoundTripsNameAndEnum) {
  ASSERT_EQ(isa::kSchemeCount, 4u);
  std::set<std::string> names;
  for (size_t i = 0; i < isa::kSchemeCount; ++i) {
    const isa::SchemeInfo& s = isa::kSchemes[i];
    EXPECT_EQ(static_cast<size_t>(s.scheme), i) << s.name << ": rows follow the enum";
    EXPECT_STREQ(isa::scheme_name(s.scheme), s.name);
    ASSERT_TRUE(isa::scheme_from_name(s.name).has_value()) << s.name;
    EXPECT_EQ(*isa::scheme_from_name(s.name), s.scheme);
    EXPECT_TRUE(names.insert(s.name).second) << s.name << " twice";
  }
  EXPECT_FALSE(isa::scheme_from_name("all").has_value());  // "all" is a request, not a scheme
  EXPECT_FALSE(isa::scheme_from_name("Single").has_value());
  EXPECT_EQ(isa::scheme_names(" | "), "single | multi | global4 | global8");
}

// What each row means (docs/npu.md "Modes"): the cores a target needs and where a run goes.
TEST(SchemeTable, RowsHoldTheSchemesMeaning) {
  EXPECT_EQ(isa::scheme_info(isa::Scheme::kSingle).min_cores(), 1);
  EXPECT_EQ(isa::scheme_info(isa::Scheme::kSingle).instances_for(3), 3);  // one per slot
  EXPECT_EQ(isa::scheme_info(isa::Scheme::kMulti).min_cores(), 4);
  EXPECT_EQ(isa::scheme_info(isa::Scheme::kMulti).instances_for(3), 4);
  EXPECT_EQ(isa::scheme_info(isa::Scheme::kGlobal4).cores_per_instance, 4);
  EXPECT_EQ(isa::scheme_info(isa::Scheme::kGlobal8).min_cores(), 8);
  EXPECT_EQ(isa::scheme_info(isa::Scheme::kGlobal8).placement, isa::CorePlacement::kAllCores);
  EXPECT_EQ(isa::scheme_info(isa::Scheme::kGlobal4).placement, isa::CorePlacement::kOneCluster);
}

// The config's enum (proto/compile_options.proto) spells exactly the table's names, plus
// "all"; config::isa_scheme maps each spelling to its row.
TEST(SchemeTable, ConfigEnumIsTheTable) {
  std::set<std::string> config_names;
  const auto* e = config::InferenceScheme_descriptor();
  for (int i = 0; i < e->value_count(); ++i) {
    const auto v = static_cast<config::InferenceScheme>(e->value(i)->number());
    if (v == config::INFERENCE_SCHEME_UNSPECIFIED) continue;
    const std::string name = config::spell(v);
    config_names.insert(name);
    const std::optional<isa::Scheme> row = config::isa_scheme(v);
    if (v == config::INFERENCE_SCHEME_ALL) {
      EXPECT_EQ(name, "all");
      EXPECT_FALSE(row.has_value());
    } else {
      ASSERT_TRUE(row.has_value()) << name << " has no row in isa/schemes.def";
      EXPECT_EQ(isa::scheme_name(*row), name);
    }
  }
  std::set<std::string> table = {"all"};
  for (const isa::SchemeInfo& s : isa::kSchemes) table.insert(s.name);
  EXPECT_EQ(config_names, table);
}

// `qbc run --core-mode` accepts runtime::core_modes(): "auto", then the table in order.
TEST(SchemeTable, RuntimeCoreModesAreTheTable) {
  const std::vector<std::string> modes = runtime::core_modes();
  ASSERT_EQ(modes.size(), isa::kSchemeCount + 1);
  EXPECT_EQ(modes[0], "auto");
  for (size_t i = 0; i < isa::kSchemeCount; ++i) EXPECT_EQ(modes[i + 1], isa::kSchemes[i].name);
}

}  // namespace
}  // namespace qbc
