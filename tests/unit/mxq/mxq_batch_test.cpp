// Batch serving from an MXQ file: stories260K compiled with runtime.batchSize = 4 holds one
// mode of four instance slots; four cached sequences interleaved through one device, each
// dumped (NpuSession::dump_kv) and reloaded (load_kv, into another slot) midway, give
// exactly the logits of four separate runs, and a blob of another layout, a truncated blob
// and junk are refused without changing the cache.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "qbc/runtime/model.h"
#include "qbc/runtime/npu_session.h"
#include "test_support.h"
#include "unit/mxq/compile_fixture.h"

namespace qbc {
namespace {

std::vector<int32_t> sequence(int k) {
  std::vector<int32_t> ids;
  uint32_t s = 1000u + 77u * static_cast<uint32_t>(k);
  for (int i = 0; i < 24; ++i) {
    s = s * 1664525u + 1013904223u;
    ids.push_back(static_cast<int32_t>((s >> 8) % 512));
  }
  return ids;
}

const testing::CompiledMxq& batch4() {
  static const testing::CompiledMxq c = testing::compile_stories260k(
      "mxq_batch", {"llm.attributes.runtime.batchSize=4", "llm.attributes.maxCoreDataLength=16"});
  return c;
}

std::unique_ptr<runtime::NpuSession> session(const std::shared_ptr<runtime::Device>& d, int slot) {
  auto s = runtime::NpuSession::create(d, slot);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(*s) : nullptr;
}

/// Feeds ids[from, to) to `s` in calls of `step` tokens, appending the logits.
void feed(runtime::NpuSession& s, const std::vector<int32_t>& ids, size_t from, size_t to,
          size_t step, std::vector<float>* out) {
  for (size_t i = from; i < to; i += step) {
    std::vector<int32_t> part(ids.begin() + static_cast<long>(i),
                              ids.begin() + static_cast<long>(std::min(to, i + step)));
    std::vector<float> l;
    ASSERT_TRUE(s.forward(part, &l).ok());
    out->insert(out->end(), l.begin(), l.end());
  }
}

TEST(MxqBatch, InterleavedSequencesDumpedAndReloadedEqualSeparateRuns) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  ASSERT_TRUE(batch4().error.empty()) << batch4().error;
  runtime::LoadOptions lo;
  lo.host_threads = 1;
  auto m = runtime::load_model(batch4().path.string(), lo);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ(m->file.bundle->modes.size(), 1u);
  ASSERT_EQ(m->file.bundle->modes[0].instances, 4);
  ASSERT_EQ(m->file.meta.kv(0).batch(), 4);

  // Four separate runs, each alone on slot 0 of its own device.
  std::vector<std::vector<float>> alone(4);
  for (int k = 0; k < 4; ++k) {
    auto d = runtime::load_model(batch4().path.string(), lo);
    ASSERT_TRUE(d.ok());
    auto s = session(d->device, 0);
    feed(*s, sequence(k), 0, 24, 5, &alone[static_cast<size_t>(k)]);
  }

  // Interleaved on the four slots of one device; midway each sequence is dumped, its slot
  // reset and scribbled over by another sequence's prefix, and the blob is loaded back into
  // the slot of the next sequence (the slots rotate).
  std::vector<std::unique_ptr<runtime::NpuSession>> s;
  for (int k = 0; k < 4; ++k) s.push_back(session(m->device, k));
  std::vector<std::vector<float>> got(4);
  for (size_t at = 0; at < 12; at += 3)
    for (int k = 0; k < 4; ++k) feed(*s[k], sequence(k), at, at + 3, 3, &got[k]);
  std::vector<std::string> blobs(4);
  for (int k = 0; k < 4; ++k) {
    auto b = s[k]->dump_kv();
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    blobs[k] = *b;
    s[k]->reset();
    std::vector<float> junk;
    feed(*s[k], sequence(3 - k), 0, 7, 7, &junk);  // overwrite the slot's cache
  }
  // Sequence k continues in slot (k + 1) % 4.
  std::vector<std::unique_ptr<runtime::NpuSession>> moved(4);
  for (int k = 0; k < 4; ++k) {
    moved[k] = session(m->device, (k + 1) % 4);
    ASSERT_TRUE(moved[k]->load_kv(blobs[k]).ok());
    EXPECT_EQ(moved[k]->position(), 12);
  }
  for (size_t at = 12; at < 24; at += 4)
    for (int k = 0; k < 4; ++k) feed(*moved[k], sequence(k), at, at + 4, 1, &got[k]);
  for (int k = 0; k < 4; ++k) {
    ASSERT_EQ(got[k].size(), alone[k].size()) << k;
    EXPECT_EQ(std::memcmp(got[k].data(), alone[k].data(), got[k].size() * 4), 0)
        << "sequence " << k;
  }
}

TEST(MxqBatch, BadKvBlobsAreRefusedAndChangeNothing) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  ASSERT_TRUE(batch4().error.empty()) << batch4().error;
  auto m = runtime::load_model(batch4().path.string());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto s = session(m->device, 0);
  std::vector<float> l;
  ASSERT_TRUE(s->forward(sequence(0), &l).ok());
  auto blob = s->dump_kv();
  ASSERT_TRUE(blob.ok());
  for (const std::string& bad :
       {std::string("junk"), blob->substr(0, blob->size() - 1), *blob + "x",
        std::string(blob->data(), 24) + std::string(16, '\0') + blob->substr(40)}) {
    const Status st = s->load_kv(bad);
    EXPECT_FALSE(st.ok());
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.to_string();
    EXPECT_EQ(s->position(), 24);
  }
  auto again = s->dump_kv();
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(*again == *blob);
}

}  // namespace
}  // namespace qbc
