// Choosing physical cores (LoadOptions::cores, `--cores`): "cluster:core" entries checked
// against the target and the mode's rules, the same logits on any placement, and slots
// without a core refused.
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

using ::qbc::testing::contains;

const testing::CompiledMxq& all_modes() {
  static const testing::CompiledMxq c =
      testing::compile_stories260k("core_placement", {"inferenceScheme=all"});
  return c;
}

const isa::Mode& mode_of(const isa::Bundle& b, isa::Scheme s) {
  for (const isa::Mode& m : b.modes)
    if (m.scheme == s) return m;
  return b.modes.front();
}

TEST(CorePlacement, EntriesAreCheckedAgainstTheTargetAndTheMode) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  ASSERT_TRUE(all_modes().error.empty()) << all_modes().error;
  const isa::Bundle& b = *all_modes().bundle;
  ASSERT_EQ(b.target_cores, 8);
  ASSERT_EQ(b.target_clusters, 2);
  const isa::Mode& single = mode_of(b, isa::Scheme::kSingle);
  const isa::Mode& g4 = mode_of(b, isa::Scheme::kGlobal4);
  const isa::Mode& g8 = mode_of(b, isa::Scheme::kGlobal8);
  auto placed = runtime::place_cores(b, single, {"1:3"});
  QBC_ASSERT_OK(placed);
  EXPECT_EQ(*placed, std::vector<int32_t>({7}));
  placed = runtime::place_cores(b, g4, {"1:2", "1:0", "1:1", "1:3"});
  QBC_ASSERT_OK(placed);
  EXPECT_EQ(*placed, std::vector<int32_t>({6, 4, 5, 7}));
  EXPECT_TRUE(runtime::place_cores(b, single, {}).value().empty());
  struct Bad {
    const isa::Mode* mode;
    std::vector<std::string> cores;
    const char* says;
  } bad[] = {{&single, {"2:0"}, "2 cluster(s) of 4 cores"},
             {&single, {"0:4"}, "2 cluster(s) of 4 cores"},
             {&single, {"x"}, "expected cluster:core"},
             {&single, {"0:-1"}, "expected cluster:core"},
             {&single, {"0:1", "0:2"}, "sequence slot"},
             {&g4, {"0:0", "0:1", "1:2", "1:3"}, "one cluster"},
             {&g4, {"0:0", "0:1", "0:2"}, "one cluster"},
             {&g8, {"0:0", "0:1"}, "all 8"},
             {&g8, {"0:0", "0:0", "0:1", "0:2", "0:3", "1:0", "1:1", "1:2"}, "twice"}};
  for (const Bad& x : bad) {
    auto r = runtime::place_cores(b, *x.mode, x.cores);
    ASSERT_FALSE(r.ok()) << x.says;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_TRUE(contains(r.status().message(), x.says)) << r.status().message();
  }
}

TEST(CorePlacement, AnyPlacementGivesTheSameLogits) {
  QBC_REQUIRE_SHARED(hf, "models/stories260k/hf");
  ASSERT_TRUE(all_modes().error.empty()) << all_modes().error;
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 432};
  auto logits = [&](const std::string& mode,
                    const std::vector<std::string>& cores) -> std::vector<float> {
    runtime::LoadOptions lo;
    lo.core_mode = mode;
    lo.cores = cores;
    lo.host_threads = 1;
    auto m = runtime::load_model(all_modes().path.string(), lo);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (!m.ok()) return {};
    for (size_t i = 0; i < cores.size(); ++i)
      EXPECT_EQ(m->device->physical_core(static_cast<int32_t>(i)),
                runtime::place_cores(*m->file.bundle, m->device->mode(), cores).value()[i]);
    auto s = runtime::NpuSession::create(m->device, 0);
    EXPECT_TRUE(s.ok());
    std::vector<float> out;
    EXPECT_TRUE((*s)->forward(prompt, &out).ok());
    return out;
  };
  const std::vector<float> base = logits("single", {});
  ASSERT_FALSE(base.empty());
  for (const auto& [mode, cores] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"single", {"1:3"}},
           {"global4", {"1:0", "1:1", "1:2", "1:3"}},
           {"global8", {"1:0", "1:1", "1:2", "1:3", "0:0", "0:1", "0:2", "0:3"}}}) {
    const std::vector<float> got = logits(mode, cores);
    ASSERT_EQ(got.size(), base.size()) << mode;
    EXPECT_EQ(std::memcmp(got.data(), base.data(), base.size() * 4), 0) << mode;
  }
  // A load with a core the target does not have is refused naming the file.
  runtime::LoadOptions lo;
  lo.core_mode = "single";
  lo.cores = {"3:0"};
  auto m = runtime::load_model(all_modes().path.string(), lo);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(contains(m.status().message(), all_modes().path.filename().string()))
      << m.status().message();
}

}  // namespace
}  // namespace qbc
