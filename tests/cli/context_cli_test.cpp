// The context a model was trained for (issue 28, point 5): plan warns when the context is
// longer and shows that length next to the largest context that fits memory; a preset's
// 4096 positions become the model's trained length when that is shorter (stories260K:
// 2048), with dump-config's origins saying so; an explicit value still wins and still warns.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::read_file;
using ::qbc::testing::run_qbc;
using ::qbc::testing::shell_quote;
using ::qbc::testing::temp_dir;
using ::qbc::testing::write_file;

/// The "key = value  # origin" line of `key` in dump-config --origins output.
std::string origin_line(const std::string& table, const std::string& key) {
  const size_t at = table.find(key + " = ");
  if (at == std::string::npos) return "";
  return table.substr(at, table.find('\n', at) - at);
}

/// Whether `key` has `value` with an origin starting with `origin` in that output.
bool origin_is(const std::string& table, const std::string& key, const std::string& value,
               const std::string& origin) {
  const std::string line = origin_line(table, key);
  const size_t hash = line.find("# ");
  return contains(line, "= " + value + " ") && hash != std::string::npos &&
         line.compare(hash + 2, origin.size(), origin) == 0;
}

TEST(ContextCli, PlanPastTheTrainedLengthWarnsAndNamesIt) {
  QBC_REQUIRE_SHARED(dir, "model-configs/Qwen2.5-3B-Instruct");
  const auto j = run_qbc("plan " + shell_quote(dir) +
                         " --context 262144 --kv-bits 8 --inference-scheme single --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;  // it fits in memory
  const auto plan = nlohmann::json::parse(j.out);
  EXPECT_TRUE(plan["fits"].get<bool>());
  EXPECT_EQ(plan["trained_context"], 32768);  // config.json max_position_embeddings
  EXPECT_EQ(plan["trained_context_source"], "max_position_embeddings");
  EXPECT_TRUE(plan["past_training"].get<bool>());
  ASSERT_EQ(plan["warnings"].size(), 1u);
  EXPECT_TRUE(contains(plan["warnings"][0].get<std::string>(), "32768"));
  EXPECT_TRUE(contains(j.err, "longer than the model was trained for")) << j.err;
  // The text report says it next to the largest context that fits memory.
  const auto t = run_qbc("plan " + shell_quote(dir) +
                         " --context 262144 --kv-bits 8 --inference-scheme single");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_TRUE(contains(t.out,
                       "WARNING: the cache of 262144 positions is longer than the model "
                       "was trained for (32768"))
      << t.out;
  EXPECT_TRUE(contains(t.out, "(the model was trained for 32768)")) << t.out;
  // At the trained length: no warning.
  const auto at = run_qbc("plan " + shell_quote(dir) +
                          " --context 32768 --kv-bits 8 --inference-scheme single --json");
  ASSERT_EQ(at.exit_code, 0) << at.err;
  const auto ok = nlohmann::json::parse(at.out);
  EXPECT_FALSE(ok["past_training"].get<bool>());
  EXPECT_TRUE(ok["warnings"].empty());
  EXPECT_FALSE(contains(at.err, "trained for")) << at.err;
}

TEST(ContextCli, YarnRopeScalingExtendsTheTrainedLength) {
  QBC_REQUIRE_SHARED(dir, "model-configs/Qwen2.5-3B-Instruct");
  // Qwen2.5's long-context recipe: YaRN x4 over the original 32768 positions.
  auto cfg = nlohmann::json::parse(read_file(dir / "config.json"));
  cfg["rope_scaling"] = {
      {"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  const fs::path yarn = temp_dir() / "config.json";
  write_file(yarn, cfg.dump(2));
  const auto r = run_qbc("plan --model-config " + shell_quote(yarn) +
                         " --context 131072 --kv-bits 8 --inference-scheme single --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["trained_context"], 131072);
  EXPECT_TRUE(contains(j["trained_context_source"].get<std::string>(), "yarn"));
  EXPECT_FALSE(j["past_training"].get<bool>());
}

TEST(ContextCli, PresetLengthsFollowTheModelAndOriginsSaySo) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  // stories260K: max_position_embeddings 2048, the llm preset 4096.
  const auto d = run_qbc("dump-config " + shell_quote(hf) + " --preset llm --origins");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  for (const char* key : {"llm.attributes.maxCacheLength", "llm.attributes.maxSequenceLength"}) {
    const std::string line = origin_line(d.out, key);
    EXPECT_TRUE(contains(line, "= 2048")) << line;
    EXPECT_TRUE(contains(line, "# model: max_position_embeddings 2048 (was 4096)")) << line;
  }
  // Without a model the preset's value stands.
  const auto p = run_qbc("dump-config --preset llm --origins");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_TRUE(contains(origin_line(p.out, "llm.attributes.maxCacheLength"), "= 4096"));
  // An explicit value wins: --context, a file or --set.
  const auto c =
      run_qbc("dump-config " + shell_quote(hf) + " --preset llm --context 4096 --origins");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_TRUE(origin_is(c.out, "llm.attributes.maxCacheLength", "4096", "--context")) << c.out;
  const auto s = run_qbc("dump-config " + shell_quote(hf) +
                         " --preset llm --set llm.attributes.maxCacheLength=8192 --origins");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_TRUE(origin_is(s.out, "llm.attributes.maxCacheLength", "8192", "--set"));
  EXPECT_TRUE(contains(origin_line(s.out, "llm.attributes.maxSequenceLength"), "= 2048"));
  const auto q = run_qbc("dump-config " + shell_quote(hf) +
                         " --preset llm --set llm.attributes.maxSequenceLength=1024 --origins");
  ASSERT_EQ(q.exit_code, 0) << q.err;
  EXPECT_TRUE(origin_is(q.out, "llm.attributes.maxSequenceLength", "1024", "--set"));
  EXPECT_TRUE(origin_is(q.out, "llm.attributes.maxCacheLength", "2048", "model"));
}

TEST(ContextCli, CompileUsesTheTrainedLengthAndWarnsOnlyForAnExplicitLonger) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const fs::path dir = temp_dir();
  const std::string base = "compile " + shell_quote(hf) +
                           " --preset llm_fast --use-random-calib --set calibration.numSamples=2"
                           " --set calibration.seqLength=16";
  const auto a = run_qbc(base + " -o " + shell_quote(dir / "a.mxq"));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_FALSE(contains(a.err, "compiled for")) << a.err;  // no cache warning
  EXPECT_FALSE(contains(a.err, "trained for")) << a.err;
  const auto ia = run_qbc("inspect " + shell_quote(dir / "a.mxq") + " --json");
  ASSERT_EQ(ia.exit_code, 0) << ia.err;
  EXPECT_EQ(nlohmann::json::parse(ia.out)["max_cache"], 2048);
  // The stored configuration holds the value, so it recompiles to the same bytes.
  const auto cfg = run_qbc("dump-config " + shell_quote(dir / "a.mxq") + " --format json");
  ASSERT_EQ(cfg.exit_code, 0) << cfg.err;
  EXPECT_EQ(nlohmann::json::parse(cfg.out)["llm"]["attributes"]["maxCacheLength"], 2048);
  // An explicit longer cache is kept, and warned about.
  const auto b = run_qbc(base + " --context 4096 -o " + shell_quote(dir / "b.mxq"));
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_TRUE(contains(b.err, "compiled for 4096 positions")) << b.err;
  EXPECT_TRUE(contains(b.err, "max_position_embeddings is 2048")) << b.err;
  const auto ib = run_qbc("inspect " + shell_quote(dir / "b.mxq") + " --json");
  ASSERT_EQ(ib.exit_code, 0) << ib.err;
  EXPECT_EQ(nlohmann::json::parse(ib.out)["max_cache"], 4096);
}

}  // namespace
}  // namespace qbc
