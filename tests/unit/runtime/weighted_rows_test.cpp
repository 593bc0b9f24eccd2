// weighted_rows_u8 (src/runtime/matmul_kernel.h), attention's Σ e·v over value rows as
// stored, against a loop written here from its contract: every kernel this host takes (VNNI,
// and the portable loops under QBC_EXEC_NO_VNNI=1, a second ctest entry) gives the same
// int32 sums for key counts around the four-key step, channel counts around the 64-channel
// step, row counts around the four-row block, padded row strides, and the extreme codes.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "matmul_kernel.h"

namespace qbc::runtime {
namespace {

struct Case {
  const char* name;
  int64_t rows, keys, width, pad;  ///< pad: extra bytes per value row (ldv = width + pad)
  bool extreme;                    ///< e = 255 and v = -128 everywhere
};

const Case kCases[] = {
    {"decode_gqa3_hd64", 3, 256, 64, 0, false},
    {"one_row_one_key", 1, 1, 64, 0, false},
    {"keys_not_multiple_of_4", 2, 7, 64, 0, false},
    {"keys_5_rows_9", 9, 5, 64, 3, false},
    {"hd128_padded_records", 4, 130, 128, 4, false},
    {"hd80_tail_channels", 5, 33, 80, 0, false},
    {"hd32_narrow", 6, 64, 32, 1, false},
    {"prefill_64_rows", 64, 96, 64, 0, false},
    {"extreme_codes", 4, 1024, 64, 0, true},
};

class WeightedRows : public ::testing::TestWithParam<Case> {};

TEST_P(WeightedRows, SameSumsAsTheContract) {
  const Case& c = GetParam();
  const int64_t ldv = c.width + c.pad, lde = c.keys + 2, ldo = c.width + 1;
  std::mt19937 rng(static_cast<uint32_t>(c.rows * 131 + c.keys * 7 + c.width));
  std::vector<uint8_t> e(static_cast<size_t>(c.rows * lde));
  std::vector<int8_t> v(static_cast<size_t>(c.keys * ldv));
  for (uint8_t& x : e) x = c.extreme ? 255 : static_cast<uint8_t>(rng() & 0xFF);
  for (int8_t& x : v) x = c.extreme ? int8_t{-128} : static_cast<int8_t>(rng() & 0xFF);
  std::vector<int32_t> got(static_cast<size_t>(c.rows * ldo), 0x5A5A5A5A);
  weighted_rows_u8(e.data(), lde, c.rows, v.data(), ldv, c.keys, c.width, got.data(), ldo);
  for (int64_t m = 0; m < c.rows; ++m) {
    for (int64_t ch = 0; ch < c.width; ++ch) {
      int64_t want = 0;
      for (int64_t j = 0; j < c.keys; ++j)
        want += int64_t{e[static_cast<size_t>(m * lde + j)]} * v[static_cast<size_t>(j * ldv + ch)];
      ASSERT_EQ(got[static_cast<size_t>(m * ldo + ch)], want)
          << c.name << " row " << m << " channel " << ch
          << (dot_u8_fast() ? " (VNNI)" : " (portable)");
    }
    EXPECT_EQ(got[static_cast<size_t>(m * ldo + c.width)], 0x5A5A5A5A) << "wrote past the row";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, WeightedRows, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.name);
                         });

}  // namespace
}  // namespace qbc::runtime
