// The backend as passes (docs/npu.md "Passes", "Pipelines"): the named
// pipelines and their rows, each pass's honest answer to "did you change
// anything", --disable-pass and
// --dump-after reaching the backend, and a dump being the plan or program text
// the pass produced.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "qbc/npu/compile.h"
#include "test_support.h"
#include "unit/npu/small_case.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::small_case;

std::vector<std::string> names(const std::vector<pass::PipelineEntry>& entries) {
  std::vector<std::string> out;
  for (const pass::PipelineEntry& e : entries) out.push_back(e.pass);
  return out;
}

TEST(NpuPipelines, NamedPipelinesAreRowsOfRegisteredPasses) {
  const std::vector<std::string> all = {"plan-tiles",   "plan-memory", "check-fit",
                                        "fill-weights", "lower",       "assign-tokens",
                                        "check-context"};
  auto compile = npu::pipeline("npu-compile");
  QBC_ASSERT_OK(compile);
  EXPECT_EQ(names(*compile), all);
  for (const pass::PipelineEntry& e : *compile) {
    EXPECT_TRUE(npu::is_pass(e.pass)) << e.pass;
    EXPECT_FALSE(e.enabled_by.empty()) << e.pass;
    EXPECT_FALSE(e.why.empty()) << e.pass;
  }
  auto fit = npu::pipeline("npu-fit");
  QBC_ASSERT_OK(fit);
  EXPECT_EQ(names(*fit), (std::vector<std::string>{"plan-tiles", "plan-memory", "check-fit"}));
  auto plan = npu::pipeline("npu-plan");
  QBC_ASSERT_OK(plan);
  EXPECT_EQ(names(*plan), (std::vector<std::string>{"plan-tiles", "plan-memory", "fill-weights"}));
  EXPECT_EQ(npu::pipeline("npu-nothing").status().code(), Code::kInternal);
  std::vector<std::string> registered = npu::pass_names();
  std::vector<std::string> sorted = all;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(registered, sorted);
}

TEST(NpuPipelines, EachPassSaysHonestlyWhetherItChangedTheBundle) {
  QBC_REQUIRE_SHARED(cfg, "model-configs/SmolLM2-135M-Instruct/config.json");
  auto c = small_case();
  QBC_ASSERT_OK(c);
  std::vector<pass::PassRecord> records;
  auto b = npu::run_pipeline("npu-compile", c->graph, c->options, nullptr, {}, {}, &records);
  QBC_ASSERT_OK(b);
  std::vector<std::string> ran;
  for (const pass::PassRecord& r : records) {
    ran.push_back(r.name);
    // The checks change nothing; every other pass builds part of the bundle.
    const bool check = r.name == "check-fit" || r.name == "check-context";
    EXPECT_EQ(r.changed, !check) << r.name;
  }
  EXPECT_EQ(ran, names(*npu::pipeline("npu-compile")));
  EXPECT_EQ(b->modes.size(), 2u);
  EXPECT_TRUE(b->image.empty());  // shapes only
}

TEST(NpuPipelines, TheFitPipelineStopsAtThePlan) {
  QBC_REQUIRE_SHARED(cfg, "model-configs/SmolLM2-135M-Instruct/config.json");
  auto c = small_case();
  QBC_ASSERT_OK(c);
  auto b = npu::run_pipeline("npu-fit", c->graph, c->options, nullptr);
  QBC_ASSERT_OK(b);
  EXPECT_TRUE(b->modes.empty());
  EXPECT_GT(b->dram.weights, 0);
  EXPECT_GT(b->dram.kv, 0);
  // A device too small: check-fit refuses (exit 4), unless it is disabled.
  c->options.target.dram_bytes = b->dram.weights;
  EXPECT_EQ(npu::run_pipeline("npu-fit", c->graph, c->options, nullptr).status().code(),
            Code::kResourceExhausted);
  pass::Instrumentation off;
  off.disabled = {"check-fit"};
  QBC_ASSERT_OK(npu::run_pipeline("npu-fit", c->graph, c->options, nullptr, {}, off));
}

TEST(NpuPipelines, OnlyTheChecksCanBeDisabledAndDumpsNameAPassOfThePipeline) {
  pass::Instrumentation instr;
  instr.disabled = {"check-context", "spinR1"};  // another stage's name is not the backend's
  QBC_ASSERT_OK(npu::check_instrumentation("npu-compile", instr));
  instr.disabled = {"lower"};
  const Status s = npu::check_instrumentation("npu-compile", instr);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "--disable-pass lower")) << s.message();
  instr.disabled.clear();
  instr.dump_after = {"check-context"};
  EXPECT_EQ(npu::check_instrumentation("npu-fit", instr).code(), Code::kInvalidArgument);
  QBC_ASSERT_OK(npu::check_instrumentation("npu-compile", instr));
}

TEST(NpuPipelines, DumpAfterWritesThePlanThenThePrograms) {
  QBC_REQUIRE_SHARED(cfg, "model-configs/SmolLM2-135M-Instruct/config.json");
  auto c = small_case();
  QBC_ASSERT_OK(c);
  pass::Instrumentation instr;
  instr.dump_after = {"all"};
  instr.dump_dir = (testing::temp_dir() / "dumps").string();
  instr.disabled = {"check-context"};
  QBC_ASSERT_OK(npu::run_pipeline("npu-compile", c->graph, c->options, nullptr, {}, instr));
  const fs::path d = instr.dump_dir;
  const std::string tiles = testing::read_file(d / "01-plan-tiles.npu.txt");
  EXPECT_TRUE(contains(tiles, "tiles\n")) << tiles;
  EXPECT_TRUE(contains(tiles, "blk.0.attn.q_proj qlinear")) << tiles;
  EXPECT_FALSE(contains(tiles, "dram\n")) << tiles;  // no memory plan yet
  const std::string memory = testing::read_file(d / "02-plan-memory.npu.txt");
  EXPECT_TRUE(contains(memory, "dram\n")) << memory;
  EXPECT_TRUE(contains(memory, "kcache: kv at")) << memory;
  EXPECT_TRUE(contains(memory, "capacity the cache")) << memory;
  const std::string lowered = testing::read_file(d / "05-lower.npu.txt");
  EXPECT_TRUE(contains(lowered, "matmul")) << lowered.substr(0, 2000);
  EXPECT_FALSE(fs::exists(d / "07-check-context.npu.txt"));  // disabled
}

}  // namespace
}  // namespace qbc
