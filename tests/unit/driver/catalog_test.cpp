// The preset and target listings of `qbc presets` / `qbc targets` (qbc/driver/catalog.h): text
// and JSON list the same entries, and a profile's keys carry the kind its provenance gives.
#include "qbc/driver/catalog.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "qbc/config/presets.h"
#include "qbc/config/target.h"
#include "test_support.h"

namespace qbc::driver {
namespace {

using qbc::testing::contains;

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream is(text);
  for (std::string l; std::getline(is, l);) out.push_back(l);
  return out;
}

TEST(Catalog, PresetsTextAndJsonListEveryPreset) {
  const std::vector<config::Preset> presets = config::presets();
  ASSERT_FALSE(presets.empty());
  const CatalogListing l = list_presets();
  const std::vector<std::string> text = lines(l.text);
  const nlohmann::json json = nlohmann::json::parse(l.json);
  ASSERT_EQ(text.size(), presets.size()) << l.text;
  ASSERT_EQ(json.size(), presets.size()) << l.json;
  for (size_t i = 0; i < presets.size(); ++i) {
    const std::string& name = presets[i].name;
    // The name, then spaces up to column 12 (at least one), then the description.
    EXPECT_EQ(text[i].rfind(name + " ", 0), 0u) << text[i];
    EXPECT_EQ(text[i].substr(std::max<size_t>(name.size() + 1, 12)), presets[i].description);
    EXPECT_EQ(json[i]["name"], name);
    EXPECT_EQ(json[i]["path"], presets[i].path);
  }
}

TEST(Catalog, TargetsListEveryBuiltinProfileWithItsCores) {
  const std::vector<std::string> names = config::builtin_target_names();
  auto l = list_targets();
  QBC_ASSERT_OK(l);
  const nlohmann::json json = nlohmann::json::parse(l->json);
  ASSERT_EQ(json.size(), names.size());
  ASSERT_EQ(lines(l->text).size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    auto t = config::load_target(names[i]);
    QBC_ASSERT_OK(t);
    EXPECT_EQ(json[i]["name"], names[i]);
    EXPECT_EQ(json[i]["cores"], t->profile.clusters() * t->profile.cores_per_cluster());
    EXPECT_TRUE(contains(l->text, names[i] + " ")) << l->text;
  }
}

TEST(Catalog, ProfileKeysCarryTheirProvenanceKind) {
  const std::filesystem::path p = qbc::testing::temp_dir() / "board.yaml";
  qbc::testing::write_file(p,
                           "name: board\n"
                           "description: a test board\n"
                           "clusters: 3\n"
                           "coresPerCluster: 5\n"
                           "provenance:\n"
                           "  clusters: {kind: fact, note: \"datasheet p. 7\"}\n"
                           "  coresPerCluster: {kind: fitted, note: \"measured\"}\n");
  auto l = describe_target(p.string());
  QBC_ASSERT_OK(l);
  EXPECT_EQ(l->text.rfind("# " + p.string() + "\n", 0), 0u) << l->text;
  EXPECT_TRUE(contains(l->text, "clusters: 3\n    [fact] datasheet p. 7\n")) << l->text;
  EXPECT_TRUE(contains(l->text, "coresPerCluster: 5\n    [fitted] measured\n")) << l->text;
  std::map<std::string, nlohmann::json> rows;
  for (const nlohmann::json& row : nlohmann::json::parse(l->json)) rows[row["key"]] = row;
  ASSERT_EQ(rows.count("clusters"), 1u) << l->json;
  EXPECT_EQ(rows["clusters"]["value"], 3);
  EXPECT_EQ(rows["clusters"]["kind"], "fact");
  EXPECT_EQ(rows["coresPerCluster"]["kind"], "fitted");
  ASSERT_EQ(rows.count("sramBytesPerCore"), 1u);
  EXPECT_EQ(rows["sramBytesPerCore"]["kind"], "unspecified");
  EXPECT_EQ(rows["sramBytesPerCore"]["note"], "");
}

TEST(Catalog, UnknownProfileIsNotFound) {
  auto l = describe_target("no-such-board");
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), Code::kNotFound);
  EXPECT_TRUE(contains(l.status().message(), "no-such-board")) << l.status().message();
}

}  // namespace
}  // namespace qbc::driver
