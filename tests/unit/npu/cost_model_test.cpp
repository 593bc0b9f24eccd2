// The cost model counts what the executor does: for every core of every scheme, the DRAM
// bytes by purpose, MACs, vector ops, barriers and DMAs of a call equal the executor's
// counters (full execution on stories260K, counters-only on a Llama-3.2-1B-shaped plan), and
// its times behave as the terms say (decode is DRAM-bound and slows with the cache).
#include "qbc/npu/cost_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "../mxq/compile_fixture.h"
#include "qbc/config/config.h"
#include "qbc/config/target.h"
#include "qbc/driver/backend.h"
#include "qbc/driver/plan.h"
#include "qbc/npu/compile.h"
#include "qbc/quant/shape_only.h"
#include "qbc/runtime/device.h"
#include "test_support.h"

namespace qbc {
namespace {

struct Call {
  isa::Phase phase;
  int64_t start, seq;
};

std::string label(const isa::Mode& m, const Call& c, size_t core) {
  return std::string(isa::scheme_name(m.scheme)) + " " + isa::phase_name(c.phase) + " start " +
         std::to_string(c.start) + " seq " + std::to_string(c.seq) + " core " +
         std::to_string(core);
}

/// Runs `calls` on a device of each mode and compares every core's counters with the model.
void expect_counts_match(const std::shared_ptr<const isa::Bundle>& b,
                         const std::vector<Call>& calls, bool counters_only,
                         const npu::CostParams& p) {
  ASSERT_FALSE(b->modes.empty());
  for (const isa::Mode& m : b->modes) {
    runtime::DeviceOptions o;
    o.scheme = m.scheme;
    o.host_threads = 2;
    o.counters_only = counters_only;
    auto dev = runtime::Device::create(b, o);
    QBC_ASSERT_OK(dev);
    for (const Call& c : calls) {
      (*dev)->reset_counters();
      QBC_ASSERT_OK((*dev)->run(c.phase, 0, c.start, c.seq));
      npu::CallSpec spec;
      spec.phase = c.phase;
      spec.start = c.start;
      spec.seq = c.seq;
      auto cost = npu::estimate_call(*b, m, spec, p);
      QBC_ASSERT_OK(cost);
      const std::vector<runtime::CoreCounters>& got = (*dev)->counters();
      ASSERT_EQ(cost->cores.size(), static_cast<size_t>(m.cores_per_instance));
      int64_t macs = 0, bytes = 0;
      for (size_t k = 0; k < cost->cores.size(); ++k) {
        SCOPED_TRACE(label(m, c, k));
        const runtime::CoreCounters& e = got[k];  // slot 0: physical cores 0..P-1
        const npu::CostCounts& w = cost->cores[k];
        for (int pu = 0; pu < runtime::kNumPurposes; ++pu) {
          EXPECT_EQ(w.dram_read[pu], e.dram_read[pu])
              << isa::purpose_name(static_cast<isa::Purpose>(pu));
          EXPECT_EQ(w.dram_written[pu], e.dram_written[pu])
              << isa::purpose_name(static_cast<isa::Purpose>(pu));
        }
        EXPECT_EQ(w.macs, e.macs);
        EXPECT_EQ(w.vector_ops, e.vector_ops);
        EXPECT_EQ(w.barriers, e.barriers);
        EXPECT_EQ(w.dma, e.dma);
        EXPECT_EQ(w.instructions, e.instructions);
        macs += e.macs;
        bytes += w.dram_bytes();
      }
      // Something was counted: a call reads its weights and multiplies.
      EXPECT_GT(macs, 0) << label(m, c, 0);
      EXPECT_GT(bytes, 0) << label(m, c, 0);
      EXPECT_GT(cost->seconds, 0.0);
    }
  }
}

npu::CostParams aries_params() {
  auto t = config::load_target("aries-rb");
  EXPECT_TRUE(t.ok());
  return driver::cost_params(t->profile);
}

TEST(CostModel, CountsEqualTheExecutorOnStories260kForEveryScheme) {
  QBC_REQUIRE_SHARED(dir, "models/stories260k/hf");
  testing::CompiledMxq c = testing::compile_stories260k("cost_model", {"inferenceScheme=all"});
  ASSERT_TRUE(c.error.empty()) << c.error;
  ASSERT_EQ(c.bundle->modes.size(), 4u);
  const int64_t chunk = std::min<int64_t>(c.bundle->modes.front().prefill.max_seq, 20);
  const std::vector<Call> calls = {{isa::Phase::kPrefill, 0, chunk},
                                   {isa::Phase::kPrefill, chunk, 7},
                                   {isa::Phase::kDecode, chunk + 7, 1},
                                   {isa::Phase::kDecode, c.bundle->max_cache - 1, 1}};
  const npu::CostParams p = aries_params();
  expect_counts_match(c.bundle, calls, false, p);
  // The counters-only mode counts the same without computing.
  expect_counts_match(c.bundle, calls, true, p);
}

TEST(CostModel, CountsEqualTheCountersOnlyExecutorOnALlama1BShape) {
  QBC_REQUIRE_SHARED(dir, "model-configs/Llama-3.2-1B-Instruct");
  config::LoadRequest req;
  req.preset = "llm_fast";
  req.sets = {"llm.attributes.maxSequenceLength=512", "llm.attributes.maxCacheLength=512",
              "inferenceScheme=all"};
  auto cfg = config::resolve(req);
  QBC_ASSERT_OK(cfg);
  auto g = driver::shape_graph((dir / "config.json").string(), *cfg);
  QBC_ASSERT_OK(g);
  auto q = quant::shape_only(*g, cfg->options);
  QBC_ASSERT_OK(q);
  auto o = driver::backend_options(*q, *cfg);
  QBC_ASSERT_OK(o);
  // Shapes only, unverified: qbc plan's programs.
  auto b = npu::run_pipeline("npu-programs", *q, *o, nullptr);
  QBC_ASSERT_OK(b);
  auto shared = std::make_shared<const isa::Bundle>(std::move(*b));
  // A shape-only bundle cannot run for real.
  runtime::DeviceOptions real;
  EXPECT_FALSE(runtime::Device::create(shared, real).ok());
  const std::vector<Call> calls = {{isa::Phase::kPrefill, 0, 128},
                                   {isa::Phase::kPrefill, 128, 100},
                                   {isa::Phase::kDecode, 300, 1}};
  expect_counts_match(shared, calls, true, aries_params());
}

TEST(CostModel, DecodeIsDramBoundAndSlowsWithTheCache) {
  QBC_REQUIRE_SHARED(dir, "model-configs/Llama-3.2-1B-Instruct");
  config::LoadRequest req;
  req.preset = "llm_fast";
  req.sets = {"llm.attributes.maxSequenceLength=8192", "llm.attributes.maxCacheLength=8192",
              "inferenceScheme=single"};
  auto cfg = config::resolve(req);
  QBC_ASSERT_OK(cfg);
  auto g = driver::shape_graph(dir.string(), *cfg);
  QBC_ASSERT_OK(g);
  driver::PlanOptions po;
  auto r = driver::plan(*g, *cfg, po);
  QBC_ASSERT_OK(r);
  ASSERT_EQ(r->schemes.size(), 1u);
  const npu::ModePrediction& p = r->schemes[0].prediction;
  EXPECT_EQ(p.bound, npu::Bound::kDram);
  // Never faster than its own DRAM traffic at the effective bandwidth.
  EXPECT_GE(p.decode.seconds, p.decode.dram_seconds);
  EXPECT_GT(p.roofline_fraction, 0.5);
  EXPECT_LE(p.roofline_fraction, 1.0);
  // The full cache reads 8K positions of KV per step more than the start does.
  EXPECT_GT(p.decode_end_s, p.decode_s);
  const npu::CostParams cp = driver::cost_params(cfg->options.target());
  const double kv_per_step =
      static_cast<double>(r->memory.kv_bytes_per_position) * static_cast<double>(8191 - 240);
  const double predicted = kv_per_step / (cp.dram_bytes_per_s * cp.dram_efficiency);
  // K is read twice (the max pass and the sum pass), V once: 1.5x the KV term, plus the
  // per-chunk issue and DMA latencies.
  EXPECT_GE(p.decode_end_s - p.decode_s, 1.4 * predicted);
  EXPECT_LE(p.decode_end_s - p.decode_s, 1.8 * predicted);
  // The per-node table covers the step.
  double sum = 0;
  for (const npu::NodeCost& n : p.decode.nodes) sum += n.seconds;
  EXPECT_NEAR(sum, p.decode.core_seconds, 1e-9 + 1e-6 * p.decode.core_seconds);
}

}  // namespace
}  // namespace qbc
