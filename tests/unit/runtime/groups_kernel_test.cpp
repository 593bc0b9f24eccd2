// The int8 grouped kernel dot_u8_groups (src/runtime/matmul_kernel.h) against a plain
// reference written here from its contract: per group g of `group` codes (the last may be
// short) out = Σ u w and wsum = Σ w, bit for bit, whichever implementation this host runs
// (AVX-512 VNNI for groups of 32, eight groups a step; portable loops otherwise, and with
// QBC_EXEC_NO_VNNI set). The cases cross the 8- and 16-group boundaries, end in
// short steps and short groups, and pad the row strides. The matmul's zero-point algebra on
// top of these sums is checked against numerics::qlinear in linear_test.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "matmul_kernel.h"

namespace qbc::runtime {
namespace {

struct GroupsCase {
  const char* name;
  int64_t rows, n, len, group;
  int64_t x_pad = 0, w_pad = 0;  ///< extra bytes at the end of each row
};

struct Sums {
  std::vector<int32_t> out, wsum;
};

Sums reference(const GroupsCase& c, const std::vector<uint8_t>& u, const std::vector<int8_t>& w) {
  const int64_t ldx = c.len + c.x_pad, ldw = c.len + c.w_pad;
  const int64_t gt = (c.len + c.group - 1) / c.group;
  Sums r{std::vector<int32_t>(static_cast<size_t>(c.rows * c.n * gt)),
         std::vector<int32_t>(static_cast<size_t>(c.n * gt))};
  for (int64_t j = 0; j < c.n; ++j) {
    for (int64_t g = 0; g < gt; ++g) {
      const int64_t k1 = std::min(c.len, (g + 1) * c.group);
      int64_t ws = 0;
      for (int64_t k = g * c.group; k < k1; ++k) ws += w[static_cast<size_t>(j * ldw + k)];
      r.wsum[static_cast<size_t>(j * gt + g)] = static_cast<int32_t>(ws);
      for (int64_t m = 0; m < c.rows; ++m) {
        int64_t s = 0;
        for (int64_t k = g * c.group; k < k1; ++k)
          s += int64_t{u[static_cast<size_t>(m * ldx + k)]} * w[static_cast<size_t>(j * ldw + k)];
        r.out[static_cast<size_t>((m * c.n + j) * gt + g)] = static_cast<int32_t>(s);
      }
    }
  }
  return r;
}

class GroupsKernel : public ::testing::TestWithParam<GroupsCase> {};

TEST_P(GroupsKernel, MatchesTheReference) {
  const GroupsCase& c = GetParam();
  const int64_t ldx = c.len + c.x_pad, ldw = c.len + c.w_pad;
  const int64_t gt = (c.len + c.group - 1) / c.group;
  std::mt19937 gen(static_cast<uint32_t>(c.rows * 1000 + c.n * 10 + c.len));
  std::vector<uint8_t> u(static_cast<size_t>(c.rows * ldx));
  for (uint8_t& v : u) v = static_cast<uint8_t>(gen());
  std::vector<int8_t> w(static_cast<size_t>(c.n * ldw));
  for (int8_t& v : w) v = static_cast<int8_t>(static_cast<int>(gen() % 256) - 128);
  u[0] = 255;  // the extremes of both operands
  w[0] = -128;
  const Sums want = reference(c, u, w);
  for (bool with_wsum : {true, false}) {
    // Sentinels: every entry the kernel should write is checked, and nothing past them moves.
    Sums got{std::vector<int32_t>(static_cast<size_t>(c.rows * c.n * gt + 1), -7),
             std::vector<int32_t>(static_cast<size_t>(c.n * gt + 1), -7)};
    dot_u8_groups(u.data(), ldx, c.rows, w.data(), ldw, c.n, c.len, c.group, got.out.data(),
                  c.n * gt, with_wsum ? got.wsum.data() : nullptr);
    EXPECT_EQ(got.out.back(), -7) << "wrote past out";
    EXPECT_EQ(got.wsum.back(), -7) << "wrote past wsum";
    got.out.pop_back();
    got.wsum.pop_back();
    EXPECT_EQ(got.out, want.out) << (with_wsum ? "with" : "without") << " wsum";
    if (with_wsum) {
      EXPECT_EQ(got.wsum, want.wsum);
    } else {
      EXPECT_EQ(got.wsum, std::vector<int32_t>(want.wsum.size(), -7)) << "wsum written";
    }
  }
}

//                                 name          rows  n   len  group  x_pad w_pad
const GroupsCase kGroupsCases[] = {
    {"decode_135m_576_g32", 1, 67, 576, 32},  {"decode_head_1536_g32", 1, 9, 1536, 32},
    {"prefill_odd_rows_g32", 5, 13, 576, 32}, {"sixteen_groups_exactly", 2, 3, 512, 32},
    {"one_past_sixteen", 2, 3, 544, 32},      {"short_last_step", 3, 5, 96, 32},
    {"short_last_group", 2, 5, 50, 32},       {"one_code", 1, 3, 1, 32},
    {"odd_length_tail", 3, 4, 1023, 32},      {"padded_strides", 3, 6, 200, 32, 5, 3},
    {"group64_portable", 2, 5, 200, 64},      {"group48_portable", 2, 5, 144, 48},
};

INSTANTIATE_TEST_SUITE_P(Cases, GroupsKernel, ::testing::ValuesIn(kGroupsCases),
                         [](const ::testing::TestParamInfo<GroupsCase>& i) {
                           return std::string(i.param.name);
                         });

}  // namespace
}  // namespace qbc::runtime
