// `qbc parse`, `inspect` and `verify` behind the driver (qbc/driver/parse_model.h, inspect.h,
// inspect_mxq.h, verify_compiled.h): what each reports of a hand-written graph, of
// stories260K parsed and compiled, and the errors naming the file for what they refuse.
#include "qbc/driver/inspect.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "qbc/config/config.h"
#include "qbc/driver/config_dump.h"
#include "qbc/driver/inspect_mxq.h"
#include "qbc/driver/parse_model.h"
#include "qbc/driver/stored_config.h"
#include "qbc/driver/verify_compiled.h"
#include "qbc/ir/serialize.h"
#include "test_support.h"
#include "unit/mxq/compile_fixture.h"

namespace qbc::driver {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using qbc::testing::contains;

// A hand-written graph: one RMSNorm (8 weights) feeding one linear (4 x 8 weights).
const char* kNormLinear = R"(mblt 1
graph @g
weight @n.weight : f32[8] = model "n.weight"
weight @l.weight : f32[4,8] = model "l.weight"
%inputs_embeds = input() : f32[?,?,8]
%positions = input() : i64[?,?]
%n = rms_norm(%inputs_embeds, @n.weight) {eps = 1e-05, group = 0, unit_offset = 0} : f32[?,?,8]
%logits = linear(%n, @l.weight) : f32[?,?,4]
return %logits
)";

std::string write_graph_text() {
  const fs::path p = testing::temp_dir() / "g.mblt.txt";
  testing::write_file(p, kNormLinear);
  return p.string();
}

TEST(InspectGraph, SummaryNamesTheGraphItsInputsOutputsAndOps) {
  GraphInspectRequest r;
  r.path = write_graph_text();
  auto out = inspect_graph(r);
  QBC_ASSERT_OK(out);
  EXPECT_TRUE(contains(out->text, "(graph @g)")) << out->text;
  EXPECT_TRUE(contains(out->text, "inputs_embeds f32[?,?,8]")) << out->text;
  EXPECT_TRUE(contains(out->text, "outputs       logits f32[?,?,4]")) << out->text;
  EXPECT_TRUE(contains(out->text, "linear 1")) << out->text;
  EXPECT_TRUE(contains(out->text, "rms_norm 1")) << out->text;
  EXPECT_FALSE(contains(out->text, "%n = rms_norm")) << "the graph text only with --graph";
  ASSERT_EQ(out->event, "inspect");
  const json j = json::parse(out->event_json);
  EXPECT_EQ(j["file"], r.path);
  EXPECT_EQ(j["nodes"], 4);
  EXPECT_EQ(j["ops"]["input"], 2);
  EXPECT_EQ(j["parameters"]["host_embedding"], 0);
  EXPECT_EQ(j["parameters"]["body"].get<int64_t>() + j["parameters"]["head"].get<int64_t>(),
            8 + 4 * 8);
}

TEST(InspectGraph, JsonIsTheEventIndentedAndGraphAppendsTheText) {
  GraphInspectRequest r;
  r.path = write_graph_text();
  r.json = true;
  r.graph = true;
  auto out = inspect_graph(r);
  QBC_ASSERT_OK(out);
  const size_t graph_at = out->text.find("mblt 1\n");
  ASSERT_NE(graph_at, std::string::npos) << out->text;
  EXPECT_EQ(json::parse(out->text.substr(0, graph_at)), json::parse(out->event_json));
  EXPECT_TRUE(contains(out->text.substr(graph_at), "%n = rms_norm(%inputs_embeds, @n.weight)"));
}

TEST(InspectGraph, RefusesWhatIsNotAGraphNamingTheFile) {
  GraphInspectRequest r;
  r.path = (testing::temp_dir() / "weights.bin").string();
  auto out = inspect_graph(r);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(out.status().message(), r.path)) << out.status().to_string();
}

TEST(InspectGraph, ProgramOfAFileThatIsNotAQuantizedMbltPointsAtPlan) {
  GraphInspectRequest r;
  r.path = write_graph_text();
  r.program = true;
  auto out = inspect_graph(r);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(out.status().message(), r.path)) << out.status().to_string();
  EXPECT_TRUE(contains(out.status().message(), "qbc plan")) << out.status().to_string();
}

TEST(ParseModel, WritesTheGraphWithItsProducerAndNoVisionFileForATextModel) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  const fs::path dir = testing::temp_dir();
  const fs::path out = dir / "s.mblt";
  auto vision = write_vision_mblt(hf.string(), out.string(), "qbc test");
  QBC_ASSERT_OK(vision);
  EXPECT_FALSE(vision->has_value());
  auto cfg = config::resolve(config::LoadRequest{});
  QBC_ASSERT_OK(cfg);
  auto f = write_model_mblt(hf.string(), *cfg, out.string(), "qbc test");
  QBC_ASSERT_OK(f);
  EXPECT_EQ(f->path, out.string());
  EXPECT_EQ(f->bytes, static_cast<int64_t>(fs::file_size(out)));
  EXPECT_FALSE(fs::exists(dir / "s.vision.mblt"));
  auto g = ir::load(out.string());
  QBC_ASSERT_OK(g);
  EXPECT_EQ(g->metadata["producer"], "qbc test");
  EXPECT_EQ(f->nodes, g->nodes().size());
  EXPECT_EQ(f->weights, g->weights().size());
  EXPECT_GT(f->nodes, 0u);
}

TEST(InspectCompiled, AFileThatIsNotAnMxqIsRefusedNamingIt) {
  const fs::path p = testing::temp_dir() / "broken.mxq";
  testing::write_file(p, std::string(4096, 'x'));
  auto m = open_compiled(p.string());
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(contains(m.status().message(), p.string())) << m.status().to_string();
  auto v = verify_compiled(p.string(), "", "");
  ASSERT_FALSE(v.ok());
  EXPECT_TRUE(contains(v.status().message(), p.string())) << v.status().to_string();
  auto c = stored_config(p.string());
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(contains(c.status().message(), p.string())) << c.status().to_string();
}

const testing::CompiledMxq& compiled() {
  static const testing::CompiledMxq c = testing::compile_stories260k("driver_inspect", {});
  return c;
}

#define REQUIRE_COMPILED()                             \
  QBC_REQUIRE_SHARED(hf_dir, "models/stories260k/hf"); \
  ASSERT_TRUE(compiled().error.empty()) << compiled().error;

TEST(InspectCompiled, SummaryListsTheFileWithItsSize) {
  REQUIRE_COMPILED();
  const std::string path = compiled().path.string();
  auto m = open_compiled(path);
  QBC_ASSERT_OK(m);
  auto out = inspect_compiled(path, *m, CompiledInspectRequest{});
  QBC_ASSERT_OK(out);
  EXPECT_EQ(out->event, "inspect");
  const json j = json::parse(out->event_json);
  ASSERT_EQ(j["parts"].size(), 1u);
  EXPECT_EQ(j["parts"][0]["bytes"].get<uint64_t>(), fs::file_size(compiled().path));
  EXPECT_EQ(j["max_cache"], 64);
  EXPECT_TRUE(contains(out->text, "file         " + path)) << out->text;
  EXPECT_TRUE(contains(out->text, "cache 64 positions")) << out->text;
}

TEST(InspectCompiled, ProgramIsTheBundleTextAndCostClampsThePrompt) {
  REQUIRE_COMPILED();
  const std::string path = compiled().path.string();
  auto m = open_compiled(path);
  QBC_ASSERT_OK(m);
  CompiledInspectRequest r;
  r.program = true;
  auto program = inspect_compiled(path, *m, r);
  QBC_ASSERT_OK(program);
  EXPECT_EQ(program->text.rfind("bundle ", 0), 0u) << program->text.substr(0, 200);
  EXPECT_TRUE(program->event.empty());
  r = CompiledInspectRequest{};
  r.cost = true;
  r.prompt_tokens = 10000;
  auto cost = inspect_compiled(path, *m, r);
  QBC_ASSERT_OK(cost);
  EXPECT_EQ(cost->event, "inspect-cost");
  const json j = json::parse(cost->event_json);
  EXPECT_EQ(j["prompt_tokens"], 63) << "clamped to the 64-position cache";
  ASSERT_FALSE(j["schemes"].empty());
  EXPECT_GT(j["schemes"][0]["decode_tok_s"].get<double>(), 0.0);
  EXPECT_TRUE(contains(cost->text, "cost model of " + path)) << cost->text.substr(0, 300);
}

TEST(VerifyCompiled, PassesTheCompiledFileAndRefusesOneWithAFlippedByte) {
  REQUIRE_COMPILED();
  const std::string path = compiled().path.string();
  auto m = open_compiled(path);
  QBC_ASSERT_OK(m);
  auto summary = inspect_compiled(path, *m, CompiledInspectRequest{});
  QBC_ASSERT_OK(summary);
  auto ok = verify_compiled(path, "", "");
  QBC_ASSERT_OK(ok);
  EXPECT_EQ(ok->summary.rfind(path + ": ok (1 file, ", 0), 0u) << ok->summary;
  const json j = json::parse(ok->json);
  EXPECT_EQ(j["ok"], true);
  EXPECT_EQ(j["bytes"].get<uint64_t>(), fs::file_size(compiled().path));
  EXPECT_EQ(json::parse(ok->json_text), j);

  // One byte in the middle of the largest section (its digest no longer matches).
  const json file = json::parse(summary->event_json);
  json largest;
  for (const json& sec : file["parts"][0]["sections"])
    if (largest.is_null() || sec["bytes"].get<uint64_t>() > largest["bytes"].get<uint64_t>())
      largest = sec;
  ASSERT_FALSE(largest.is_null());
  std::string bytes = compiled().bytes;
  const uint64_t at = largest["offset"].get<uint64_t>() + largest["bytes"].get<uint64_t>() / 2;
  ASSERT_LT(at, bytes.size());
  bytes[at] ^= 0x5a;
  const fs::path bad = testing::temp_dir() / "flipped.mxq";
  testing::write_file(bad, bytes);
  auto refused = verify_compiled(bad.string(), "", "");
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(contains(refused.status().message(), bad.string())) << refused.status().to_string();
}

TEST(StoredConfig, IsTheConfigurationTheFileWasCompiledWith) {
  REQUIRE_COMPILED();
  auto c = stored_config(compiled().path.string());
  QBC_ASSERT_OK(c);
  const std::string as_json = config_text(c->options, "json");
  const json j = json::parse(as_json);
  EXPECT_EQ(j["llm"]["attributes"]["maxCacheLength"], 64) << as_json.substr(0, 400);
  const std::string yaml = config_text(c->options, "yaml");
  EXPECT_TRUE(contains(yaml, "maxCacheLength: 64")) << yaml.substr(0, 400);
}

}  // namespace
}  // namespace qbc::driver
