// runtime::LlmModel, the vendor-shaped API, on stories260K compiled to MXQ with batchSize 4:
// a batch call with one BatchParam per sequence gives each sequence's logits of a separate
// run, cache_size rewinds (re-running a suffix gives the same logits), caches dumped to a
// folder load back into another cache id, and bad calls are refused naming the parameter.
#include "qbc/runtime/llm_model.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "test_support.h"
#include "unit/mxq/compile_fixture.h"

namespace qbc {
namespace {

using ::qbc::testing::contains;

const testing::CompiledMxq& batch4() {
  static const testing::CompiledMxq c = testing::compile_stories260k(
      "llm_model", {"llm.attributes.runtime.batchSize=4", "llm.attributes.maxCoreDataLength=16"});
  return c;
}

std::vector<int32_t> ids(int k, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back((37 * k + 11 * i + 1) % 512);
  return out;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST(LlmModel, BatchCallsRewindsAndCacheFilesEqualSeparateRuns) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  ASSERT_TRUE(batch4().error.empty()) << batch4().error;
  runtime::LoadOptions lo;
  lo.host_threads = 1;
  auto m = runtime::LlmModel::create(batch4().path.string(), lo);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  runtime::LlmModel& model = **m;
  ASSERT_EQ(model.batch(), 4);
  // Separate runs: each sequence alone on cache 0 of a fresh model, prefill then 3 decodes.
  std::vector<std::vector<float>> alone(4);
  for (int k = 0; k < 4; ++k) {
    auto one = runtime::LlmModel::create(batch4().path.string(), lo);
    ASSERT_TRUE(one.ok());
    const std::vector<int32_t> t = ids(k, 10 + k);
    auto e = (*one)->embed(t);
    ASSERT_TRUE(e.ok());
    auto l = (*one)->infer(*e, 0);
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    alone[k] = *l;
  }
  // One batch call: the four prompts concatenated, one BatchParam each (cache ids shuffled).
  std::vector<float> in;
  std::vector<runtime::BatchParam> params;
  for (int k : {2, 0, 3, 1}) {
    auto e = model.embed(ids(k, 10 + k));
    ASSERT_TRUE(e.ok());
    in.insert(in.end(), e->begin(), e->end());
    params.push_back({10 + k, 0, (k + 1) % 4});
  }
  auto out = model.infer(in, params);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  size_t at = 0;
  for (int k : {2, 0, 3, 1}) {
    const size_t n = static_cast<size_t>((10 + k) * model.vocab());
    EXPECT_TRUE(same(std::vector<float>(out->begin() + at, out->begin() + at + n), alone[k]))
        << "sequence " << k;
    at += n;
    EXPECT_EQ(model.cache_size((k + 1) % 4), 10 + k);
  }
  // Rewind: the last 3 tokens of sequence 0 again, from cache_size 7.
  auto e0 = model.embed(ids(0, 10));
  ASSERT_TRUE(e0.ok());
  auto again =
      model.infer(std::vector<float>(e0->begin() + 7 * model.hidden(), e0->end()), {{3, 7, 1}});
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_TRUE(
      same(*again, std::vector<float>(alone[0].begin() + 7 * model.vocab(), alone[0].end())));
  // A cache file moves sequence 0 from cache 1 to cache 0.
  const std::string dir = (::qbc::testing::temp_dir() / "caches").string();
  ASSERT_TRUE(model.dump_cache_to(dir, 1).ok());
  model.reset();
  ASSERT_TRUE(model.load_cache_from(dir, 1).ok());  // into cache 1 again: the file's name
  auto blob = model.dump_cache(1);
  ASSERT_TRUE(blob.ok());
  ASSERT_TRUE(model.load_cache(*blob, 0).ok());
  EXPECT_EQ(model.cache_size(0), 10);
  auto next = model.embed({5});
  ASSERT_TRUE(next.ok());
  auto a = model.infer(*next, {{1, 10, 0}});
  auto b = model.infer(*next, {{1, 10, 1}});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(same(*a, *b));
  // Refusals name what is wrong.
  EXPECT_TRUE(contains(model.infer(*next, {{1, 0, 4}}).status().message(), "cache_id 4"));
  EXPECT_TRUE(contains(model.infer(*next, {{1, 50, 0}}).status().message(), "cache_size 50"));
  EXPECT_TRUE(contains(model.infer(in, {{1, 0, 0}}).status().message(), "values for 1 rows"));
  EXPECT_EQ(model.infer(*next, {{1, 0, 2}, {1, 0, 2}}).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace qbc
