// The grouped decode kernels (src/runtime/group_stream.h) against a reference written here from
// their contract: out[q] (+)= Σ_{k in group q % gt} (x_k − xz)(w(q / gt, k) − wz[q]) modulo
// 2^32, for int8 weights and packed signed int4 weights, with and without zero points and
// accumulation, both the SIMD kernels this host runs and the portable loops, bit for bit. The
// cases put a step of 16 groups across channel boundaries (gt of 1, 2, 3, 18 and 48), leave
// short last steps, take the extreme codes and zero points, and write to an unaligned output
// with sentinels on both sides.
#include "group_stream.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace qbc::runtime {
namespace {

struct StreamCase {
  const char* name;
  int64_t n, kt;
  int32_t xz;
  bool zero_points, accumulate;
};

/// Signed 4-bit code k of packed row bytes (low nibble first), sign-extended by hand.
int32_t nibble(const uint8_t* row, int64_t k) {
  const int32_t v = k % 2 == 0 ? (row[k / 2] & 0xF) : (row[k / 2] >> 4);
  return v >= 8 ? v - 16 : v;
}

std::vector<int32_t> reference(const StreamCase& c, bool int4, const std::vector<int8_t>& x,
                               const std::vector<int8_t>& w8, const std::vector<uint8_t>& w4,
                               const std::vector<int32_t>& wz, const std::vector<int32_t>& old) {
  const int64_t gt = c.kt / 32;
  std::vector<int32_t> out(static_cast<size_t>(c.n * gt));
  for (int64_t j = 0; j < c.n; ++j) {
    for (int64_t g = 0; g < gt; ++g) {
      const int64_t q = j * gt + g;
      const int64_t z = c.zero_points ? wz[static_cast<size_t>(q)] : 0;
      int64_t s = 0;
      for (int64_t k = g * 32; k < g * 32 + 32; ++k) {
        const int64_t w = int4 ? nibble(w4.data() + j * c.kt / 2, k)
                               : int64_t{w8[static_cast<size_t>(j * c.kt + k)]};
        s += (int64_t{x[static_cast<size_t>(k)]} - c.xz) * (w - z);
      }
      if (c.accumulate) s += old[static_cast<size_t>(q)];
      out[static_cast<size_t>(q)] = static_cast<int32_t>(static_cast<uint32_t>(s));
    }
  }
  return out;
}

using Kernel8 = void (*)(const StreamRow&, const int8_t*, int64_t, const StreamZeros&, bool,
                         uint8_t*);
using Kernel4 = void (*)(const StreamRow&, const uint8_t*, int64_t, const StreamZeros&, bool,
                         uint8_t*);

/// The zero points `z` stored three ways, each from element `first` of its array: int32
/// values, int8 codes and packed int4 codes (low nibble first; `z` within int4 for that one).
struct StoredZeros {
  std::vector<uint8_t> i32, i8, i4;
  StoredZeros(const std::vector<int32_t>& z, int64_t first) {
    const size_t n = z.size() + static_cast<size_t>(first);
    i32.assign(4 * n, 0xEE);
    i8.assign(n, 0xEE);
    i4.assign((n + 1) / 2, 0xEE);
    for (size_t q = 0; q < z.size(); ++q) {
      const size_t i = q + static_cast<size_t>(first);
      std::memcpy(i32.data() + 4 * i, &z[q], 4);
      i8[i] = static_cast<uint8_t>(static_cast<int8_t>(z[q]));
      const uint8_t nib = static_cast<uint8_t>(z[q] & 0xF);
      i4[i / 2] = i % 2 == 0 ? static_cast<uint8_t>((i4[i / 2] & 0xF0) | nib)
                             : static_cast<uint8_t>((i4[i / 2] & 0x0F) | (nib << 4));
    }
  }
  StreamZeros as(StreamZeros::Kind k, int64_t first) const {
    const std::vector<uint8_t>& v = k == StreamZeros::Kind::kI32  ? i32
                                    : k == StreamZeros::Kind::kI8 ? i8
                                                                  : i4;
    return StreamZeros{k, v.data(), first};
  }
};

/// Runs one kernel into an unaligned buffer holding `old`, with sentinels around it.
template <typename Call>
std::vector<int32_t> run(const std::vector<int32_t>& old, const Call& call) {
  const size_t count = old.size();
  std::vector<uint8_t> buf(1 + 4 * (count + 2), 0xA5);
  uint8_t* out = buf.data() + 1 + 4;  // odd address: no alignment assumed
  std::memcpy(out, old.data(), 4 * count);
  call(out);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(buf[i], 0xA5) << "wrote before out";
  for (size_t i = 5 + 4 * count; i < buf.size(); ++i) EXPECT_EQ(buf[i], 0xA5) << "wrote past out";
  std::vector<int32_t> got(count);
  std::memcpy(got.data(), out, 4 * count);
  return got;
}

class GroupStream : public ::testing::TestWithParam<StreamCase> {};

TEST_P(GroupStream, EveryKernelMatchesTheContract) {
  const StreamCase& c = GetParam();
  const int64_t gt = c.kt / 32, count = c.n * gt;
  std::mt19937 gen(static_cast<uint32_t>(c.n * 7919 + c.kt * 31 + c.xz));
  std::vector<int8_t> x(static_cast<size_t>(c.kt));
  for (int8_t& v : x) v = static_cast<int8_t>(static_cast<int>(gen() % 256) - 128);
  x[0] = -128;
  x[static_cast<size_t>(c.kt - 1)] = 127;
  std::vector<int8_t> w8(static_cast<size_t>(c.n * c.kt));
  for (int8_t& v : w8) v = static_cast<int8_t>(static_cast<int>(gen() % 256) - 128);
  w8[0] = -128;
  w8.back() = 127;
  std::vector<uint8_t> w4(static_cast<size_t>(c.n * c.kt / 2));
  for (uint8_t& v : w4) v = static_cast<uint8_t>(gen());
  w4[0] = 0x88;  // two codes of -8
  w4.back() = 0x77;
  std::vector<int32_t> wz8(static_cast<size_t>(count)), wz4(static_cast<size_t>(count)),
      old(static_cast<size_t>(count));
  for (size_t i = 0; i < wz8.size(); ++i) {
    wz8[i] = static_cast<int32_t>(gen() % 256) - 128;
    wz4[i] = static_cast<int32_t>(gen() % 16) - 8;
    old[i] = static_cast<int32_t>(gen());  // wraps with the sums
  }
  wz8[0] = -128;
  wz4[0] = -8;
  wz8.back() = 127;
  wz4.back() = 7;
  old[0] = INT32_MAX;

  StreamRow r8, r4;
  r8.prepare_i8(x.data(), c.kt, c.xz);
  r4.prepare_i4(x.data(), c.kt, c.xz);
  const std::vector<int32_t> want8 = reference(c, false, x, w8, w4, wz8, old);
  const std::vector<int32_t> want4 = reference(c, true, x, w8, w4, wz4, old);
  const std::vector<int32_t> want8_z4 = reference(c, false, x, w8, w4, wz4, old);
  using Kind = StreamZeros::Kind;
  // Where the zero points are stored: none, or each kind from element 0, 6 and (packed int4:
  // the portable loops) 3 of its array.
  std::vector<std::pair<Kind, int64_t>> stores = {{Kind::kNone, 0}};
  if (c.zero_points) {
    stores = {{Kind::kI32, 0}, {Kind::kI32, 3}, {Kind::kI8, 0}, {Kind::kI8, 3},
              {Kind::kI4, 0},  {Kind::kI4, 6},  {Kind::kI4, 3}};
  }
  for (const auto& [kind, first] : stores) {
    const StoredZeros z8(wz8, first), z4(wz4, first);
    const std::string where = std::to_string(static_cast<int>(kind)) + "@" + std::to_string(first);
    // int8 weights: their int8 zero points, or (stored as packed int4 codes: int4 weights
    // unpacked to int8) the int4 ones.
    const std::vector<int32_t>& want8z = kind == Kind::kI4 ? want8_z4 : want8;
    for (Kernel8 k : {&group_stream_i8, &group_stream_i8_portable}) {
      const StreamZeros wz = (kind == Kind::kI4 ? z4 : z8).as(kind, first);
      EXPECT_EQ(run(old, [&](uint8_t* o) { k(r8, w8.data(), c.n, wz, c.accumulate, o); }), want8z)
          << (k == &group_stream_i8 ? "int8, dispatched, zeros " : "int8, portable, zeros ")
          << where;
    }
    for (Kernel4 k : {&group_stream_i4, &group_stream_i4_portable}) {
      const StreamZeros wz = z4.as(kind, first);
      EXPECT_EQ(run(old, [&](uint8_t* o) { k(r4, w4.data(), c.n, wz, c.accumulate, o); }), want4)
          << (k == &group_stream_i4 ? "int4, dispatched, zeros " : "int4, portable, zeros ")
          << where;
    }
  }
}

//                                   name                      n    kt    xz   zero  accumulate
const StreamCase kStreamCases[] = {
    {"decode_135m_576_zero_points", 96, 576, 3, true, false},
    {"decode_135m_576_accumulate", 96, 576, -5, true, true},
    {"decode_1536_no_zero_points", 9, 1536, 0, false, false},
    {"one_group_a_row", 37, 32, 11, true, false},
    {"two_groups_a_row", 13, 64, -128, true, true},
    {"three_groups_a_row", 11, 96, 127, true, false},
    {"short_last_step", 1, 160, 7, true, true},
    {"single_channel_18_groups", 1, 576, 0, true, false},
    {"xz_extremes_low", 5, 192, -128, false, true},
    {"xz_extremes_high", 5, 192, 127, true, false},
};

INSTANTIATE_TEST_SUITE_P(Cases, GroupStream, ::testing::ValuesIn(kStreamCases),
                         [](const ::testing::TestParamInfo<StreamCase>& i) {
                           return std::string(i.param.name);
                         });

TEST(GroupStreamRows, SeveralRowsGiveEachRowsSingleRowSums) {
  // 1 to 6 rows (the four-, three-, two- and one-row passes and a second pass of four), for
  // one, two, three and 18 groups a row, every zero-point storage, from element 0 and 6.
  using Kind = StreamZeros::Kind;
  std::mt19937 gen(5);
  for (int64_t gt : {1, 2, 3, 18}) {
    const int64_t n = 7, kt = 32 * gt;
    std::vector<uint8_t> w4(static_cast<size_t>(n * kt / 2));
    for (uint8_t& v : w4) v = static_cast<uint8_t>(gen());
    std::vector<int32_t> z(static_cast<size_t>(n * gt));
    for (int32_t& v : z) v = static_cast<int32_t>(gen() % 16) - 8;
    std::vector<StreamRow> rows(6);
    std::vector<std::vector<int8_t>> xs(6, std::vector<int8_t>(static_cast<size_t>(kt)));
    for (int64_t r = 0; r < 6; ++r) {
      for (int8_t& v : xs[static_cast<size_t>(r)])
        v = static_cast<int8_t>(static_cast<int>(gen() % 256) - 128);
      rows[static_cast<size_t>(r)].prepare_i4(xs[static_cast<size_t>(r)].data(), kt,
                                              static_cast<int32_t>(r * 37 % 256) - 128);
    }
    const int64_t ldo = (n * gt + 3) * 4 + 1;  // padded, odd: no alignment assumed
    for (const auto& [kind, first] : std::vector<std::pair<Kind, int64_t>>{
             {Kind::kNone, 0}, {Kind::kI32, 0}, {Kind::kI8, 6}, {Kind::kI4, 0}, {Kind::kI4, 6}}) {
      const StoredZeros stored(z, first);
      const StreamZeros wz = stored.as(kind, first);
      for (int64_t count = 1; count <= 6; ++count) {
        for (bool accumulate : {false, true}) {
          std::vector<uint8_t> got(static_cast<size_t>(6 * ldo), 0x5A), want = got;
          group_stream_i4_rows(rows.data(), count, w4.data(), n, wz, accumulate, got.data(), ldo);
          for (int64_t r = 0; r < count; ++r) {
            group_stream_i4_portable(rows[static_cast<size_t>(r)], w4.data(), n, wz, accumulate,
                                     want.data() + r * ldo);
          }
          EXPECT_EQ(got, want) << "gt " << gt << ", zeros " << static_cast<int>(kind) << "@"
                               << first << ", " << count << " rows, accumulate " << accumulate;
        }
      }
    }
  }
}

TEST(GroupStreamRow, LaysOutTheRowRepeatedPastItsEnd) {
  std::vector<int8_t> x(64);
  for (size_t k = 0; k < x.size(); ++k) x[k] = static_cast<int8_t>(k * 5 - 100);
  StreamRow r;
  r.prepare_i8(x.data(), 64, -3);
  r.prepare_i4(x.data(), 64, -3);
  ASSERT_EQ(r.gt(), 2);
  for (int64_t i = 0; i < 64 + 32; ++i)
    EXPECT_EQ(r.u()[i], static_cast<uint8_t>(x[static_cast<size_t>(i % 64)] + 128)) << i;
  for (int64_t i = 0; i < 32 + 48; ++i) {
    const int64_t g = (i / 16) % 2, b = i % 16;
    EXPECT_EQ(r.even()[i], x[static_cast<size_t>(g * 32 + 2 * b)]) << i;
    EXPECT_EQ(r.odd()[i], x[static_cast<size_t>(g * 32 + 2 * b + 1)]) << i;
  }
  for (int64_t i = 0; i < 2 + 16; ++i) {
    int64_t s = 0;
    for (int64_t k = (i % 2) * 32; k < (i % 2) * 32 + 32; ++k) s += x[static_cast<size_t>(k)] + 3;
    EXPECT_EQ(r.xs()[i], static_cast<uint32_t>(s)) << i;
  }
}

TEST(GroupStreamRow, APreparedRowIsReusedOnlyWhenCodesZeroPointAndLayoutAreTheSame) {
  std::vector<int8_t> x(96), w(96);
  for (size_t k = 0; k < x.size(); ++k) {
    x[k] = static_cast<int8_t>(k * 7 - 50);
    w[k] = static_cast<int8_t>(k * 3 - 40);
  }
  std::vector<uint8_t> w4(48);
  for (size_t i = 0; i < w4.size(); ++i) w4[i] = static_cast<uint8_t>(i * 37);
  // Σ (x − xz)(w − 0) of the row's three groups, as the kernels give it.
  auto sums8 = [&](StreamRow& r) {
    std::vector<int32_t> out(3);
    group_stream_i8(r, w.data(), 1, StreamZeros{}, false, reinterpret_cast<uint8_t*>(out.data()));
    return out;
  };
  auto sums4 = [&](StreamRow& r) {
    std::vector<int32_t> out(3);
    group_stream_i4(r, w4.data(), 1, StreamZeros{}, false, reinterpret_cast<uint8_t*>(out.data()));
    return out;
  };
  StreamRow cached, fresh;
  cached.prepare_i8(x.data(), 96, 4);
  const std::vector<int32_t> first = sums8(cached);
  x[40] = static_cast<int8_t>(x[40] + 1);  // one code changes in the same buffer
  cached.prepare_i8(x.data(), 96, 4);
  fresh.prepare_i8(x.data(), 96, 4);
  EXPECT_EQ(sums8(cached), sums8(fresh));
  EXPECT_NE(sums8(cached), first);
  cached.prepare_i8(x.data(), 96, -9);  // the same codes, another zero point
  fresh = StreamRow();
  fresh.prepare_i8(x.data(), 96, -9);
  EXPECT_EQ(sums8(cached), sums8(fresh));
  cached.prepare_i4(x.data(), 96, -9);  // the same row, the other layout
  fresh = StreamRow();
  fresh.prepare_i4(x.data(), 96, -9);
  EXPECT_EQ(sums4(cached), sums4(fresh));
  cached.prepare_i4(x.data(), 64, -9);  // a shorter row: two groups
  EXPECT_EQ(cached.gt(), 2);
}

}  // namespace
}  // namespace qbc::runtime
