// The parts of bits by budget that need no model (src/driver/bit_budget.cpp): the size
// argument's units, the bisection over prefix lengths (the largest that meets the target, and
// how many plans it costs), and the order linears keep 8 bits in.
#include "qbc/driver/bit_budget.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace qbc::driver {
namespace {

struct SizeCase {
  const char* text;
  double bytes;  // < 0: refused
};

TEST(BitBudget, ParseSizeUnits) {
  const SizeCase cases[] = {
      {"1", 1073741824.0},
      {"1.5", 1610612736.0},
      {"1.5GiB", 1610612736.0},
      {"900MiB", 943718400.0},
      {"900 MiB", 943718400.0},
      {"512KiB", 524288.0},
      {"2GB", 2e9},
      {"300MB", 3e8},
      {"64kB", 64000.0},
      {"4096B", 4096.0},
      {"0", -1},
      {"-1GiB", -1},
      {"", -1},
      {"GiB", -1},
      {"3 parsecs", -1},
      {"1e400", -1},
      {"0.5B", -1},
      {"2TiB", -1},
  };
  for (const SizeCase& c : cases) {
    const StatusOr<double> v = parse_size(c.text, "--target-size");
    if (c.bytes < 0) {
      ASSERT_FALSE(v.ok()) << c.text;
      EXPECT_EQ(v.status().code(), Code::kInvalidArgument) << c.text;
      EXPECT_NE(v.status().message().find("--target-size"), std::string::npos) << c.text;
      continue;
    }
    ASSERT_TRUE(v.ok()) << c.text << ": " << v.status().message();
    EXPECT_DOUBLE_EQ(*v, c.bytes) << c.text;
  }
}

struct PrefixCase {
  int64_t n;
  int64_t last_ok;  // ok(k) for k <= last_ok; -1: never
  int64_t want;
};

TEST(BitBudget, LargestPrefixBisects) {
  const PrefixCase cases[] = {
      {0, 0, 0},     {0, -1, -1}, {1, 0, 0},        {1, 1, 1},    {10, -1, -1},
      {10, 0, 0},    {10, 3, 3},  {10, 9, 9},       {10, 10, 10}, {10, 25, 10},
      {112, 57, 57}, {113, 1, 1}, {1000, 999, 999},
  };
  for (const PrefixCase& c : cases) {
    int calls = 0;
    std::vector<int64_t> asked;
    const auto ok = [&](int64_t k) -> StatusOr<bool> {
      ++calls;
      asked.push_back(k);
      EXPECT_GE(k, 0);
      EXPECT_LE(k, c.n);
      return k <= c.last_ok;
    };
    const StatusOr<int64_t> k = largest_prefix(c.n, ok);
    ASSERT_TRUE(k.ok());
    EXPECT_EQ(*k, c.want) << "n " << c.n << " last " << c.last_ok;
    // ok(0), ok(n), then at most ceil(log2(n)) more.
    const int bound = 2 + (c.n > 1 ? static_cast<int>(std::ceil(std::log2(c.n))) : 0);
    EXPECT_LE(calls, bound) << "n " << c.n << " last " << c.last_ok;
  }
}

TEST(BitBudget, LargestPrefixPassesErrorsOn) {
  const auto failing = [](int64_t k) -> StatusOr<bool> {
    if (k == 5) return internal_error("plan failed at 5");
    return k < 7;
  };
  const StatusOr<int64_t> k = largest_prefix(10, failing);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.status().message().find("plan failed at 5"), std::string::npos);
}

TEST(BitBudget, SensitivityOrderIsErrorPerWeightLargestFirst) {
  std::vector<quant::LinearBitError> e(5);
  // density = (e4 - e8) / (rows * cols)
  e[0] = {"a", 10, 10, 0.02, 0.0};   // 2e-4
  e[1] = {"b", 100, 10, 0.5, 0.1};   // 4e-4
  e[2] = {"c", 10, 10, 0.03, 0.01};  // 2e-4, after a (ties keep graph order)
  e[3] = {"d", 1, 1, 0.0, 0.001};    // negative: last
  e[4] = {"e", 20, 10, 0.2, 0.0};    // 1e-3
  const std::vector<size_t> order = sensitivity_order(e);
  const std::vector<size_t> want = {4, 1, 0, 2, 3};
  EXPECT_EQ(order, want);
}

}  // namespace
}  // namespace qbc::driver
