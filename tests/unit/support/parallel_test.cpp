// first_error_parallel: every index runs when all succeed, and the error reported is the
// lowest failing index's whatever the thread count, as a sequential run would report.
#include "qbc/support/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

namespace qbc {
namespace {

TEST(FirstErrorParallel, RunsEveryIndexWhenAllSucceed) {
  for (int threads : {1, 2, 4}) {
    std::vector<std::atomic<int>> runs(100);
    const Status s = first_error_parallel(
        100,
        [&](int64_t i) {
          runs[static_cast<size_t>(i)].fetch_add(1);
          return ok_status();
        },
        threads);
    EXPECT_TRUE(s.ok()) << s.to_string();
    for (const auto& r : runs) EXPECT_EQ(r.load(), 1);
  }
  EXPECT_TRUE(first_error_parallel(0, [](int64_t) { return invalid_argument("never"); }).ok());
}

TEST(FirstErrorParallel, ReportsTheLowestFailingIndex) {
  for (int threads : {1, 2, 3, 8}) {
    const Status s = first_error_parallel(
        64,
        [](int64_t i) {
          if (i == 41 || i == 17 || i == 63) return invalid_argument("index ", i);
          return ok_status();
        },
        threads);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_EQ(s.message(), "index 17") << threads << " threads";
  }
}

}  // namespace
}  // namespace qbc
