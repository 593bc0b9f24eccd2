// The 8-bit host embedding (bit.embedding 8; docs/numerics.md "8-bit embedding", docs/mxq.md
// required feature bit 4) on stories260K: the file's embedding section is the row scales then
// the int8 codes of the graph's table, rows + rows x hidden bytes instead of 4 x rows x hidden;
// the executor run from the file alone gives the fake-quant evaluator's logits bit for bit
// (and other logits than the float table's); a truncated section, a bad row scale or the
// feature bit cleared are refused with exit 2 naming the embedding section.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "qbc/driver/model_loader.h"
#include "qbc/mxq/container.h"
#include "qbc/mxq/model_file.h"
#include "qbc/numerics/embedding_rows.h"
#include "qbc/quant/fakequant.h"
#include "qbc/runtime/device.h"
#include "qbc/runtime/npu_session.h"
#include "qbc/support/exit_codes.h"
#include "test_support.h"
#include "unit/mxq/compile_fixture.h"
#include "unit/mxq/mutate.h"

namespace qbc {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;

const testing::CompiledMxq& compiled() {
  static const testing::CompiledMxq c =
      testing::compile_stories260k("embedding_i8", {"bit.embedding=8"});
  return c;
}

#define REQUIRE_COMPILED()                             \
  QBC_REQUIRE_SHARED(hf_dir, "models/stories260k/hf"); \
  ASSERT_TRUE(compiled().error.empty()) << compiled().error;

// Header and section-table offsets of docs/mxq.md.
constexpr size_t kRequired = 24, kCount = 64;
constexpr uint32_t kEmbeddingKind = 5;

uint64_t get_u64(const std::string& s, size_t at) {
  uint64_t v = 0;
  std::memcpy(&v, s.data() + at, 8);
  return v;
}
void put_u64(std::string& s, size_t at, uint64_t v) { std::memcpy(s.data() + at, &v, 8); }

/// The table entry of the embedding section (docs/mxq.md: kind at +0, offset +16, size +24).
size_t embedding_entry(const std::string& s) {
  uint32_t count = 0;
  std::memcpy(&count, s.data() + kCount, 4);
  for (uint32_t i = 0; i < count; ++i) {
    const size_t e = mxq::kHeaderBytes + size_t{i} * mxq::kEntryBytes;
    uint32_t kind = 0;
    std::memcpy(&kind, s.data() + e, 4);
    if (kind == kEmbeddingKind) return e;
  }
  return 0;
}

/// The quantized graph next to the MXQ and its float table.
struct Graph {
  driver::LoadedModel model;
  std::vector<float> table;
  int64_t rows = 0, hidden = 0;
};
Graph open_graph() {
  Graph g;
  config::LoadRequest req;
  req.preset = "llm_fast";
  auto cfg = config::resolve(req);
  EXPECT_TRUE(cfg.ok());
  auto m = driver::open_model((compiled().path.parent_path() / "q.mblt").string(), *cfg);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  if (!m.ok()) return g;
  g.model = std::move(*m);
  for (const auto& [name, w] : g.model.graph.weights()) {
    if (w.role != ir::WeightRole::kHostEmbedding) continue;
    EXPECT_TRUE(driver::read_weight(g.model, w, &g.table).ok());
    g.rows = w.type.dims[0];
    g.hidden = w.type.dims[1];
  }
  return g;
}

std::unique_ptr<quant::FakeQuantSession> fake_quant(const driver::LoadedModel& m,
                                                    const ir::Graph& graph) {
  const ir::WeightReader reader = [&m](const ir::Weight& w, std::vector<float>* out) {
    return driver::read_weight(m, w, out);
  };
  auto s = quant::FakeQuantSession::create(graph, reader);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(*s) : nullptr;
}

// The section holds the row scales, then the codes, of the graph's float table quantized by
// the rule; the feature bit is set and the table is about a quarter of the fp32 one.
TEST(EmbeddingI8, SectionIsRowScalesThenCodesOfTheGraphTable) {
  REQUIRE_COMPILED();
  const std::string& s = compiled().bytes;
  EXPECT_NE(get_u64(s, kRequired) & mxq::kFeatureEmbeddingI8, 0u);
  EXPECT_EQ(get_u64(s, kRequired) & mxq::kFeatureEmbeddingBf16, 0u);
  const Graph g = open_graph();
  ASSERT_GT(g.rows, 0);
  const size_t e = embedding_entry(s);
  ASSERT_NE(e, 0u);
  const uint64_t off = get_u64(s, e + 16), size = get_u64(s, e + 24);
  ASSERT_EQ(size, static_cast<uint64_t>(g.rows * (g.hidden + 4)));
  EXPECT_LT(size * 3, static_cast<uint64_t>(g.rows * g.hidden * 4));
  std::vector<int8_t> codes(g.table.size());
  std::vector<float> scales(static_cast<size_t>(g.rows));
  ASSERT_EQ(numerics::quantize_embedding_rows(g.table.data(), g.rows, g.hidden, codes.data(),
                                              scales.data()),
            -1);
  EXPECT_EQ(std::memcmp(s.data() + off, scales.data(), scales.size() * 4), 0);
  EXPECT_EQ(std::memcmp(s.data() + off + scales.size() * 4, codes.data(), codes.size()), 0);
}

// The executor, from the file alone, equals the evaluator bit for bit: a prompt then decode
// steps. Without the key the evaluator's logits differ (the option reaches the lookup).
TEST(EmbeddingI8, ExecutorEqualsFakeQuantBitForBit) {
  REQUIRE_COMPILED();
  auto m = mxq::load_model(compiled().path.string());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_TRUE(m->bundle->embedding_is_i8());
  runtime::DeviceOptions d;
  d.host_threads = 1;
  auto dev = runtime::Device::create(m->bundle, d);
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  auto npu = runtime::NpuSession::create(*dev, 0);
  ASSERT_TRUE(npu.ok()) << npu.status().to_string();
  const Graph g = open_graph();
  auto fq = fake_quant(g.model, g.model.graph);
  ASSERT_NE(fq, nullptr);
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 42, 7};
  std::vector<float> want, got;
  ASSERT_TRUE(fq->forward(prompt, &want).ok());
  ASSERT_TRUE((*npu)->forward(prompt, &got).ok());
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0);
  for (int32_t t : {5, 140, 77}) {
    ASSERT_TRUE(fq->forward({t}, &want).ok());
    ASSERT_TRUE((*npu)->forward({t}, &got).ok());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << "decode of " << t;
  }
  ir::Graph float_table = g.model.graph;
  float_table.metadata.erase(numerics::kEmbeddingBitsKey);
  auto fq_float = fake_quant(g.model, float_table);
  ASSERT_NE(fq_float, nullptr);
  std::vector<float> other;
  ASSERT_TRUE(fq_float->forward(prompt, &other).ok());
  fq->reset();
  ASSERT_TRUE(fq->forward(prompt, &want).ok());
  EXPECT_NE(std::memcmp(other.data(), want.data(), other.size() * 4), 0);
}

void expect_refused(const std::string& bytes, const std::string& what) {
  auto bad = mxq::load_model_bytes(bytes, "q.mxq", mxq::ReadOptions{});
  ASSERT_FALSE(bad.ok()) << what;
  EXPECT_EQ(exit_code_for(bad.status()), kExitBadInput) << bad.status().to_string();
  EXPECT_TRUE(contains(bad.status().message(), "embedding")) << bad.status().to_string();
}

// A section one row of codes short, a row scale that is NaN, 0 or infinite, the feature bit
// cleared: each is exit 2 naming the embedding section (digests re-sealed so the check behind
// them is reached).
TEST(EmbeddingI8, MalformedSectionIsRefused) {
  REQUIRE_COMPILED();
  const std::string& s = compiled().bytes;
  const size_t e = embedding_entry(s);
  ASSERT_NE(e, 0u);
  const uint64_t off = get_u64(s, e + 16), size = get_u64(s, e + 24);
  {
    std::string t = s;
    // Truncated: one row of stories260K's 64 codes short; the cut-off bytes are zeroed so they
    // read as the padding before the next section and the embedding's own size check is reached.
    std::memset(t.data() + off + size - 64, 0, 64);
    put_u64(t, e + 24, size - 64);
    testing::reseal(t);
    expect_refused(t, "truncated");
  }
  for (float v : {std::numeric_limits<float>::quiet_NaN(), 0.0f,
                  std::numeric_limits<float>::infinity(), -1.0f}) {
    std::string t = s;
    std::memcpy(t.data() + off + 4 * 3, &v, 4);  // row 3's scale
    testing::reseal(t);
    expect_refused(t, "scale " + std::to_string(v));
  }
  {
    std::string t = s;
    put_u64(t, kRequired, get_u64(t, kRequired) & ~mxq::kFeatureEmbeddingI8);
    testing::reseal(t, false);
    expect_refused(t, "bit cleared");
  }
  auto clean = mxq::load_model_bytes(s, "q.mxq", mxq::ReadOptions{});
  EXPECT_TRUE(clean.ok()) << clean.status().to_string();
}

}  // namespace
}  // namespace qbc
