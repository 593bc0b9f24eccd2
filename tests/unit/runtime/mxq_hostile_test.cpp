// The MXQ reader and the runtime's loader on a small hand-made model (the head model of
// head_model.h written as MXQ), light enough for the AddressSanitizer suite of tools/test.sh:
// the file round-trips to the same logits, and a seeded mutation fuzz of 20,000 cases, half
// of them with re-sealed digests so the damage reaches the protobuf decoders, the program
// verifier and the device checks, never crashes or returns an internal error. Loaded cases
// run a prefill and a decode call, which must fail cleanly or succeed.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "head_model.h"
#include "qbc/isa/verify.h"
#include "qbc/mxq/container.h"
#include "qbc/mxq/model_file.h"
#include "qbc/npu/assign_tokens.h"
#include "qbc/runtime/npu_session.h"
#include "test_bundle.h"
#include "test_support.h"
#include "unit/mxq/mutate.h"

namespace qbc::runtime {
namespace {

namespace fs = std::filesystem;

/// The head model with dependency tokens, as the backend would emit it (it passes the
/// program verifier).
std::shared_ptr<isa::Bundle> verified_head_model() {
  testing::Model m = testing::make_model(1);
  m.bundle->dram_bytes = 1 << 20;
  m.bundle->dma_align = 16;
  const Status s = npu::assign_tokens(*m.bundle);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return m.bundle;
}

std::string head_model_mxq() {
  testing::Model m;
  m.bundle = verified_head_model();
  m.bundle->nodes = {"lm_head"};
  m.bundle->passes = {"lower"};
  m.bundle->dram.weights = static_cast<int64_t>(m.bundle->image.size());
  mxq::WriteRequest req;
  req.bundle = m.bundle.get();
  req.meta.set_producer("qbc");
  // The io specs restate the layout (the reader checks them against it).
  for (auto [spec, name, dtype, cols] :
       {std::tuple{req.meta.mutable_input(), "inputs_embeds", "fp16", m.bundle->hidden},
        std::tuple{req.meta.mutable_output(), "logits", "fp32", m.bundle->vocab}}) {
    spec->set_name(name);
    spec->set_dtype(dtype);
    spec->add_shape(m.bundle->chunk);
    spec->add_shape(cols);
  }
  req.blocks = 1;
  const fs::path p = ::qbc::testing::temp_dir() / "head.mxq";
  auto w = mxq::write_model(p.string(), req);
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  return ::qbc::testing::read_file(p);
}

StatusOr<std::vector<float>> run(const std::shared_ptr<isa::Bundle>& b) {
  DeviceOptions o;
  o.host_threads = 1;
  o.verify = [](const isa::Bundle& x) { return isa::verify(x); };
  QBC_ASSIGN_OR_RETURN(std::shared_ptr<Device> d, Device::create(b, o));
  QBC_ASSIGN_OR_RETURN(std::unique_ptr<NpuSession> s, NpuSession::create(d, 0));
  std::vector<float> out, step;
  QBC_RETURN_IF_ERROR(s->forward({3, 17, 0, 8}, &out));
  QBC_RETURN_IF_ERROR(s->forward({5}, &step));
  out.insert(out.end(), step.begin(), step.end());
  return out;
}

TEST(MxqHostile, HeadModelRoundTripsToTheSameLogits) {
  const std::string bytes = head_model_mxq();
  auto m = mxq::load_model_bytes(bytes, "head.mxq");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto want = run(verified_head_model());
  auto got = run(m->bundle);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(want->size(), got->size());
  EXPECT_EQ(std::memcmp(want->data(), got->data(), want->size() * 4), 0);
}

TEST(MxqHostile, SeededMutationFuzzNeverCrashes) {
  const std::string base = head_model_mxq();
  auto c = mxq::Container::from_bytes(base, "head.mxq");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const std::vector<mxq::SectionEntry> secs = c->sections();
  std::mt19937_64 rng(7);
  int refused = 0, loaded = 0, ran = 0;
  constexpr int kCases = 20000;
  for (int i = 0; i < kCases; ++i) {
    std::string s = base;
    ::qbc::testing::mutate(s, rng, i % 2 == 1, secs, 3, 8);
    auto m = mxq::load_model_bytes(std::move(s), "head.mxq");
    if (!m.ok()) {
      ++refused;
      EXPECT_NE(m.status().code(), Code::kInternal) << i << ": " << m.status().to_string();
      continue;
    }
    ++loaded;
    auto r = run(m->bundle);
    if (r.ok()) ++ran;
    if (!r.ok())
      EXPECT_NE(r.status().code(), Code::kInternal) << i << ": " << r.status().to_string();
  }
  std::printf("fuzz: %d cases, %d refused, %d loaded, %d ran\n", kCases, refused, loaded, ran);
  EXPECT_EQ(refused + loaded, kCases);
  EXPECT_GT(refused, kCases / 2);
}

}  // namespace
}  // namespace qbc::runtime
