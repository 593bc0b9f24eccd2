// `qbc dump-config`'s text (qbc/driver/config_dump.h): the output format its flags pick, the
// configuration as JSON or YAML, and each key's origin.
#include "qbc/driver/config_dump.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace qbc::driver {
namespace {

using qbc::testing::contains;

TEST(ConfigDump, FormatComesFromTheFlagElseTheOutputName) {
  auto f = dump_format("", "");
  QBC_ASSERT_OK(f);
  EXPECT_EQ(*f, "yaml");
  f = dump_format("", "out/c.json");
  QBC_ASSERT_OK(f);
  EXPECT_EQ(*f, "json");
  f = dump_format("yaml", "c.json");
  QBC_ASSERT_OK(f);
  EXPECT_EQ(*f, "yaml");
  f = dump_format("json", "");
  QBC_ASSERT_OK(f);
  EXPECT_EQ(*f, "json");
}

TEST(ConfigDump, JsonIntoAYamlFileIsRefused) {
  for (const char* out : {"c.yaml", "c.yml"}) {
    auto f = dump_format("json", out);
    ASSERT_FALSE(f.ok()) << out;
    EXPECT_EQ(f.status().code(), Code::kInvalidArgument);
    EXPECT_TRUE(contains(f.status().message(), out)) << f.status().message();
  }
}

config::ResolvedConfig resolved(const std::vector<std::string>& sets) {
  config::LoadRequest req;
  req.sets = sets;
  auto cfg = config::resolve(req);
  EXPECT_TRUE(cfg.ok()) << cfg.status().to_string();
  return cfg.ok() ? *cfg : config::ResolvedConfig{};
}

TEST(ConfigDump, TextIsJsonOrYamlOfTheSameOptions) {
  const config::ResolvedConfig cfg = resolved({"seed=4242"});
  const std::string json = config_text(cfg.options, "json");
  const nlohmann::json j = nlohmann::json::parse(json);
  EXPECT_EQ(j["seed"], 4242);
  const std::string yaml = config_text(cfg.options, "yaml");
  EXPECT_NE(yaml, json);
  EXPECT_TRUE(contains(yaml, "seed: 4242\n")) << yaml;
}

TEST(ConfigDump, OriginsNameTheSetOverride) {
  const std::string table = config_origins(resolved({"seed=4242"}));
  size_t at = table.find("seed = 4242");
  ASSERT_NE(at, std::string::npos) << table;
  const std::string line = table.substr(at, table.find('\n', at) - at);
  EXPECT_TRUE(contains(line, "--set")) << line;
  EXPECT_FALSE(contains(line, "default")) << line;
}

TEST(ConfigDump, ReferenceDocumentsTheKeys) {
  const std::string md = config_reference();
  EXPECT_TRUE(contains(md, "seed")) << md.substr(0, 400);
  EXPECT_TRUE(contains(md, "calibration.numSamples") || contains(md, "numSamples"));
}

}  // namespace
}  // namespace qbc::driver
