// The int4 weight kernel (src/runtime/int4_kernel.h) against a plain reference written here
// from its contract: every implementation this host runs (AVX-512 VNNI, AVX2, portable) gives
// the same int32 group sums Σ x (w + 8) and weight sums Σ (w + 8), bit for bit, for odd row
// and channel counts, groups of 32, 64 and 128 (and 48, portable only), short last groups and
// chunks, and padded row strides. The matmul's zero-point algebra on top of these sums is
// checked against numerics::qlinear in linear_test.
#include "int4_kernel.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace qbc::runtime {
namespace {

struct KernelCase {
  const char* name;
  int64_t rows, n, len, group;
  int64_t x_pad = 0, w_pad = 0;  ///< extra elements / bytes at the end of each row
};

/// Signed 4-bit code k of a packed row (low nibble first), sign-extended by hand.
int32_t code(const std::vector<uint8_t>& w, int64_t row_start, int64_t k) {
  const uint8_t b = w[static_cast<size_t>(row_start + k / 2)];
  const int32_t nib = k % 2 == 0 ? (b & 0xF) : (b >> 4);
  return nib >= 8 ? nib - 16 : nib;
}

struct Result {
  std::vector<int32_t> out, tsum;
};

Result reference(const KernelCase& c, const std::vector<int8_t>& x, const std::vector<uint8_t>& w) {
  const int64_t ldx = c.len + c.x_pad, ldw = c.len / 2 + c.w_pad;
  const int64_t gt = (c.len + c.group - 1) / c.group;
  Result r{std::vector<int32_t>(static_cast<size_t>(c.rows * c.n * gt)),
           std::vector<int32_t>(static_cast<size_t>(c.n * gt))};
  for (int64_t j = 0; j < c.n; ++j) {
    for (int64_t g = 0; g < gt; ++g) {
      int64_t ts = 0;
      for (int64_t k = g * c.group; k < std::min(c.len, (g + 1) * c.group); ++k)
        ts += code(w, j * ldw, k) + 8;
      r.tsum[static_cast<size_t>(j * gt + g)] = static_cast<int32_t>(ts);
      for (int64_t m = 0; m < c.rows; ++m) {
        int64_t s = 0;
        for (int64_t k = g * c.group; k < std::min(c.len, (g + 1) * c.group); ++k)
          s += int64_t{x[static_cast<size_t>(m * ldx + k)]} * (code(w, j * ldw, k) + 8);
        r.out[static_cast<size_t>((m * c.n + j) * gt + g)] = static_cast<int32_t>(s);
      }
    }
  }
  return r;
}

Result run(I4Kernel k, const KernelCase& c, const std::vector<int8_t>& x,
           const std::vector<uint8_t>& w, bool with_tsum) {
  const int64_t ldx = c.len + c.x_pad, ldw = c.len / 2 + c.w_pad;
  const int64_t gt = (c.len + c.group - 1) / c.group;
  // Sentinels: every entry the kernel should write is checked, and nothing past them moves.
  Result r{std::vector<int32_t>(static_cast<size_t>(c.rows * c.n * gt + 1), -7),
           std::vector<int32_t>(static_cast<size_t>(c.n * gt + 1), -7)};
  dot_i4_groups_with(k, x.data(), ldx, c.rows, w.data(), ldw, c.n, c.len, c.group, r.out.data(),
                     c.n * gt, with_tsum ? r.tsum.data() : nullptr);
  EXPECT_EQ(r.out.back(), -7) << "wrote past out";
  EXPECT_EQ(r.tsum.back(), -7) << "wrote past tsum";
  r.out.pop_back();
  r.tsum.pop_back();
  return r;
}

class Int4Kernel : public ::testing::TestWithParam<KernelCase> {};

TEST_P(Int4Kernel, EveryKernelMatchesTheReference) {
  const KernelCase& c = GetParam();
  std::mt19937 gen(static_cast<uint32_t>(c.rows * 1000 + c.n * 10 + c.len));
  std::vector<int8_t> x(static_cast<size_t>(c.rows * (c.len + c.x_pad)));
  for (int8_t& v : x) v = static_cast<int8_t>(static_cast<int>(gen() % 256) - 128);
  x[0] = -128;  // the extremes of both operands
  std::vector<uint8_t> w(static_cast<size_t>(c.n * (c.len / 2 + c.w_pad)));
  for (uint8_t& v : w) v = static_cast<uint8_t>(gen());
  w[0] = 0x88;  // two codes of -8
  const Result want = reference(c, x, w);
  std::vector<I4Kernel> kernels = {I4Kernel::kPortable};
  if (c.group % 32 == 0) {
    for (I4Kernel k : {I4Kernel::kAvx2, I4Kernel::kVnni}) {
      if (i4_kernel_available(k)) kernels.push_back(k);
    }
  }
  for (I4Kernel k : kernels) {
    const Result got = run(k, c, x, w, true);
    EXPECT_EQ(got.out, want.out) << "kernel " << static_cast<int>(k);
    EXPECT_EQ(got.tsum, want.tsum) << "kernel " << static_cast<int>(k);
    const Result no_tsum = run(k, c, x, w, false);
    EXPECT_EQ(no_tsum.out, want.out) << "kernel " << static_cast<int>(k) << " without tsum";
    EXPECT_EQ(no_tsum.tsum, std::vector<int32_t>(want.tsum.size(), -7)) << "tsum written";
  }
}

//                                 name          rows  n   len  group  x_pad w_pad
const KernelCase kKernelCases[] = {
    {"decode_135m_576_g32", 1, 67, 576, 32},   {"decode_135m_1536_g32", 1, 9, 1536, 32},
    {"prefill_odd_rows_g32", 5, 13, 576, 32},  {"seven_rows_g64", 7, 11, 576, 64},
    {"three_rows_g128", 3, 17, 576, 128},      {"g128_short_last_group", 3, 5, 200, 128},
    {"g64_short_last_group", 1, 7, 200, 64},   {"short_last_block_g32", 2, 5, 50, 32},
    {"one_chunk_tail_g32", 3, 3, 130, 32},     {"two_codes", 1, 3, 2, 32},
    {"sixteen_block_boundary", 2, 3, 512, 32}, {"past_sixteen_blocks_g64", 1, 4, 544, 64},
    {"padded_strides", 3, 6, 96, 32, 5, 3},    {"group48_portable", 2, 5, 144, 48},
    {"group_longer_than_row", 2, 4, 100, 128},
};

INSTANTIATE_TEST_SUITE_P(Cases, Int4Kernel, ::testing::ValuesIn(kKernelCases),
                         [](const ::testing::TestParamInfo<KernelCase>& i) {
                           return std::string(i.param.name);
                         });

TEST(Int4KernelSelection, GroupsOfThirtyTwoTakeTheFastestAvailableKernel) {
  const I4Kernel best = i4_kernel_available(I4Kernel::kVnni)   ? I4Kernel::kVnni
                        : i4_kernel_available(I4Kernel::kAvx2) ? I4Kernel::kAvx2
                                                               : I4Kernel::kPortable;
  EXPECT_EQ(i4_kernel_for(32), best);
  EXPECT_EQ(i4_kernel_for(128), best);
  EXPECT_EQ(i4_kernel_for(48), I4Kernel::kPortable);
  EXPECT_TRUE(i4_kernel_available(I4Kernel::kPortable));
}

}  // namespace
}  // namespace qbc::runtime
