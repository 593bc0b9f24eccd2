// The memory plan from shapes: nothing on chip grows with the context, the DRAM plan grows by
// exactly the KV cache, and a model that does not fit is refused with the table and the
// largest context and batch that would.
#include "qbc/npu/memory_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/config/target.h"
#include "qbc/frontend/hparams.h"
#include "qbc/frontend/importer.h"
#include "qbc/frontend/random_model.h"
#include "qbc/isa/program.h"
#include "qbc/npu/compile.h"
#include "qbc/quant/shape_only.h"
#include "test_support.h"
#include "unit/npu/small_case.h"

namespace qbc {
namespace {

using testing::Shaped;

/// A shared model config as a shape-only quantized graph with KV bits `kv` (small_case.h).
StatusOr<Shaped> shaped(const std::string& rel, int layers, int kv, int64_t ctx) {
  return testing::shaped_config(
      rel, layers, ctx,
      {"bit.kvCache.key=" + std::to_string(kv), "bit.kvCache.value=" + std::to_string(kv)});
}

StatusOr<npu::Target> target(const std::string& name) { return testing::test_target(name); }

StatusOr<isa::Bundle> plan(const ir::Graph& g, const npu::Target& t, int64_t ctx, int64_t batch,
                           std::vector<npu::ModeRequest> modes, bool plan_only = false) {
  npu::Options o;
  o.target = t;
  o.modes = std::move(modes);
  o.max_cache = ctx;
  o.chunk = 128;
  o.batch = batch;
  // Shapes only; the fit check and the memory plan alone (npu-fit) or everything.
  return npu::run_pipeline(plan_only ? "npu-fit" : "npu-compile", g, o, nullptr);
}

TEST(NpuMemoryPlan, LongContextChangesOnlyDramByTheKvSize) {
  QBC_REQUIRE_SHARED(dir, "model-configs/Qwen2.5-3B-Instruct");
  auto s = shaped("Qwen2.5-3B-Instruct", 2, 8, 131072);
  QBC_ASSERT_OK(s);
  auto t = target("aries-rb");
  QBC_ASSERT_OK(t);
  const std::vector<npu::ModeRequest> modes = {
      {isa::Scheme::kSingle, 1, 1}, {isa::Scheme::kGlobal4, 4, 1}, {isa::Scheme::kGlobal8, 8, 1}};
  std::vector<npu::MemoryReport> r;
  for (int64_t ctx : {32768, 65536, 131072}) {
    auto b = plan(s->graph, *t, ctx, 1, modes);
    QBC_ASSERT_OK(b);
    r.push_back(npu::memory_report(*b));
    std::printf(
        "[npu] Qwen2.5-3B x2 layers at %lld: DRAM %lld (KV %lld), SRAM peak %lld, "
        "program %lld\n",
        static_cast<long long>(ctx), static_cast<long long>(r.back().dram.total()),
        static_cast<long long>(r.back().dram.kv),
        static_cast<long long>(
            *std::max_element(r.back().sram_peak.begin(), r.back().sram_peak.end())),
        static_cast<long long>(r.back().program_bytes));
  }
  // 2 layers x 2 KV heads x 128 dims x (K + V) bytes per position at KV8.
  const int64_t per_pos = 2 * 2 * 128 * 2;
  for (size_t i = 1; i < r.size(); ++i) {
    EXPECT_EQ(r[i].sram_peak, r[0].sram_peak);
    EXPECT_EQ(r[i].program_bytes, r[0].program_bytes);
    EXPECT_EQ(r[i].dram.total() - r[0].dram.total(), r[i].dram.kv - r[0].dram.kv);
    EXPECT_EQ(r[i].dram.weights, r[0].dram.weights);
    EXPECT_EQ(r[i].dram.activations, r[0].dram.activations);
    EXPECT_EQ(r[i].dram.scratch, r[0].dram.scratch);
  }
  EXPECT_EQ(r[1].dram.kv - r[0].dram.kv, 32768 * per_pos);
  EXPECT_EQ(r[2].dram.kv - r[1].dram.kv, 65536 * per_pos);
  EXPECT_EQ(r[0].kv_bytes_per_position, per_pos);
}

TEST(NpuMemoryPlan, Llama8BAt128KWithKv16DoesNotFitAndNamesTheLargestContext) {
  QBC_REQUIRE_SHARED(dir, "model-configs/Llama-3.1-8B-Instruct");
  auto t = target("aries-rb");
  QBC_ASSERT_OK(t);
  auto s16 = shaped("Llama-3.1-8B-Instruct", 0, 16, 131072);
  QBC_ASSERT_OK(s16);
  auto b = plan(s16->graph, *t, 131072, 1, {{isa::Scheme::kSingle, 1, 1}}, true);
  ASSERT_FALSE(b.ok());
  const Status& st = b.status();
  EXPECT_EQ(st.code(), Code::kResourceExhausted);
  const std::string& m = st.message();
  std::printf("[npu] %s\n", m.c_str());
  for (const char* want :
       {"weights", "kv cache", "activations", "scratch", "reserve", "total", "device",
        "largest llm.attributes.maxCacheLength that fits",
        "largest llm.attributes.runtime.batchSize that fits", "the largest term is the kv cache"}) {
    EXPECT_TRUE(testing::contains(m, want)) << want;
  }
  // The named context fits, one more position does not.
  const std::string key = "maxCacheLength that fits: ";
  const size_t at = m.find(key);
  ASSERT_NE(at, std::string::npos);
  const int64_t largest = std::stoll(m.substr(at + key.size()));
  EXPECT_GT(largest, 0);
  EXPECT_LT(largest, 131072);
  auto s16b = shaped("Llama-3.1-8B-Instruct", 0, 16, largest);
  QBC_ASSERT_OK(s16b);
  QBC_ASSERT_OK(plan(s16b->graph, *t, largest, 1, {{isa::Scheme::kSingle, 1, 1}}, true));
  auto s16c = shaped("Llama-3.1-8B-Instruct", 0, 16, largest + 1);
  QBC_ASSERT_OK(s16c);
  EXPECT_EQ(
      plan(s16c->graph, *t, largest + 1, 1, {{isa::Scheme::kSingle, 1, 1}}, true).status().code(),
      Code::kResourceExhausted);
  // W8 KV8 at 128K: weights 8.0 GB + KV 8.6 GB against 16 GiB less the 512 MiB reserve.
  auto s8 = shaped("Llama-3.1-8B-Instruct", 0, 8, 131072);
  QBC_ASSERT_OK(s8);
  auto b8 = plan(s8->graph, *t, 131072, 1, {{isa::Scheme::kSingle, 1, 1}}, true);
  if (b8.ok()) {
    const npu::MemoryReport r = npu::memory_report(*b8);
    EXPECT_LE(r.dram.total(), r.device_bytes);
  } else {
    EXPECT_EQ(b8.status().code(), Code::kResourceExhausted);
    std::printf("[npu] W8 KV8 at 128K: %s\n", b8.status().message().c_str());
    EXPECT_TRUE(testing::contains(b8.status().message(), "the largest term is the"));
  }
}

}  // namespace
}  // namespace qbc
