// .npy reader and writer: round trip, other float dtypes and versions, and every malformed case
// the reader must reject with a Status naming the file.
#include "qbc/calib/npy.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "test_support.h"

namespace qbc::calib {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::read_file;
using ::qbc::testing::temp_dir;
using ::qbc::testing::write_file;

template <typename T>
std::string raw_bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

/// Writes a file made of `header` and `data` and returns its path.
fs::path write_raw(const std::string& name, const std::string& header, const std::string& data) {
  const fs::path p = temp_dir() / name;
  write_file(p, header + data);
  return p;
}

/// Expects read_npy_header() and read_npy() to fail with `code` and a message naming the file
/// and containing `what`.
void expect_rejected(const fs::path& p, Code code, const std::string& what) {
  StatusOr<NpyHeader> h = read_npy_header(p);
  ASSERT_FALSE(h.ok()) << p;
  EXPECT_EQ(h.status().code(), code) << h.status().to_string();
  EXPECT_TRUE(contains(h.status().message(), p.string())) << h.status().message();
  EXPECT_TRUE(contains(h.status().message(), what)) << h.status().message();
  std::vector<float> data;
  const Status s = read_npy(p, &data);
  EXPECT_EQ(s.code(), code) << s.to_string();
}

TEST(Npy, RoundTripF32) {
  const fs::path p = temp_dir() / "a.npy";
  std::vector<float> v(2 * 3 * 4);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.25f - 3.0f;
  QBC_ASSERT_OK(write_npy(p, {2, 3, 4}, v.data()));
  const std::string bytes = read_file(p);
  ASSERT_GE(bytes.size(), 128u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  // NumPy's layout: header padded so the data starts 64-byte aligned, dict ends in '\n'.
  StatusOr<NpyHeader> h = read_npy_header(p);
  QBC_ASSERT_OK(h);
  EXPECT_EQ(h->data_offset % 64, 0u);
  EXPECT_EQ(bytes[h->data_offset - 1], '\n');
  EXPECT_TRUE(contains(bytes.substr(0, h->data_offset),
                       "'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4), }"));
  EXPECT_EQ(h->dtype, NpyDtype::kF32);
  EXPECT_EQ(h->shape, (std::vector<int64_t>{2, 3, 4}));
  std::vector<float> back;
  std::vector<int64_t> shape;
  QBC_ASSERT_OK(read_npy(p, &back, &shape));
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(back, v);
  EXPECT_EQ(bytes.size(), h->data_offset + v.size() * 4);
  // No temporary files left beside the output.
  for (const auto& e : fs::directory_iterator(p.parent_path())) {
    EXPECT_EQ(e.path().filename(), "a.npy");
  }
}

TEST(Npy, OneDimensionalAndScalarShapes) {
  const fs::path p1 = temp_dir() / "v.npy";
  const std::vector<float> v = {1.5f, -2.0f, 7.0f};
  QBC_ASSERT_OK(write_npy(p1, {3}, v.data()));
  EXPECT_TRUE(contains(read_file(p1), "'shape': (3,), }"));
  std::vector<float> back;
  QBC_ASSERT_OK(read_npy(p1, &back));
  EXPECT_EQ(back, v);
  const fs::path p0 = temp_dir() / "s.npy";
  const float x = 42.0f;
  QBC_ASSERT_OK(write_npy(p0, {}, &x));
  std::vector<int64_t> shape = {9};
  QBC_ASSERT_OK(read_npy(p0, &back, &shape));
  EXPECT_TRUE(shape.empty());
  EXPECT_EQ(back, std::vector<float>{42.0f});
}

TEST(Npy, ReadsF16AndF64) {
  // Half: 1.0, -2.0, 0.5, 65504 (max), smallest subnormal 2^-24, +inf.
  const std::vector<uint16_t> halves = {0x3c00, 0xc000, 0x3800, 0x7bff, 0x0001, 0x7c00};
  const fs::path ph = write_raw("h.npy", npy_header_bytes("<f2", false, {2, 3}), raw_bytes(halves));
  std::vector<float> out;
  std::vector<int64_t> shape;
  QBC_ASSERT_OK(read_npy(ph, &out, &shape));
  EXPECT_EQ(shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(out.size(), 6u);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 0.5f);
  EXPECT_EQ(out[3], 65504.0f);
  EXPECT_EQ(out[4], std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isinf(out[5]));
  EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
  EXPECT_EQ(half_to_float(0x8000), -0.0f);
  EXPECT_EQ(half_to_float(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal

  const std::vector<double> doubles = {1.0, -0.125, 3.5e10, 1e-3};
  const fs::path pd =
      write_raw("d.npy", npy_header_bytes("<f8", false, {1, 4}, 2), raw_bytes(doubles));
  StatusOr<NpyHeader> h = read_npy_header(pd);
  QBC_ASSERT_OK(h);
  EXPECT_EQ(h->major_version, 2);
  EXPECT_EQ(h->dtype, NpyDtype::kF64);
  QBC_ASSERT_OK(read_npy(pd, &out));
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[1], -0.125f);
  EXPECT_EQ(out[2], static_cast<float>(3.5e10));
  EXPECT_EQ(out[3], static_cast<float>(1e-3));
}

TEST(Npy, ReadsVersion3AndDoubleQuotedHeaders) {
  const std::vector<float> v = {1, 2};
  const fs::path p3 = write_raw("v3.npy", npy_header_bytes("<f4", false, {2}, 3), raw_bytes(v));
  StatusOr<NpyHeader> h = read_npy_header(p3);
  QBC_ASSERT_OK(h);
  EXPECT_EQ(h->major_version, 3);
  // Hand-written header with double quotes, key order changed, no trailing comma, Python 2 longs.
  std::string dict = "{\"shape\": (1L, 2L), \"fortran_order\": False, \"descr\": \"<f4\"}";
  dict.append(128 - 10 - dict.size() - 1, ' ');
  dict += '\n';
  std::string hdr = std::string("\x93NUMPY\x01\x00", 8);
  hdr += static_cast<char>(dict.size());
  hdr += '\0';
  const fs::path p = write_raw("dq.npy", hdr + dict, raw_bytes(v));
  std::vector<float> out;
  std::vector<int64_t> shape;
  QBC_ASSERT_OK(read_npy(p, &out, &shape));
  EXPECT_EQ(shape, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(out, v);
}

TEST(Npy, RejectsFortranOrder) {
  const fs::path p =
      write_raw("f.npy", npy_header_bytes("<f4", true, {2, 2}), std::string(16, '\0'));
  expect_rejected(p, Code::kInvalidArgument, "Fortran");
}

TEST(Npy, RejectsBigEndian) {
  const fs::path p = write_raw("be.npy", npy_header_bytes(">f4", false, {2}), std::string(8, '\0'));
  expect_rejected(p, Code::kInvalidArgument, "big-endian");
}

TEST(Npy, RejectsOtherDtypes) {
  for (const char* d : {"<i4", "<u2", "|b1", "<c8", "|u1", "<f16"}) {
    const fs::path p = write_raw(std::string("dt") + d[2] + ".npy", npy_header_bytes(d, false, {2}),
                                 std::string(64, '\0'));
    expect_rejected(p, Code::kInvalidArgument, std::string("dtype '") + d + "'");
  }
}

TEST(Npy, RejectsObjectAndStructuredArrays) {
  const fs::path po = write_raw("o.npy", npy_header_bytes("|O", false, {2}), std::string(16, '\0'));
  expect_rejected(po, Code::kInvalidArgument, "object array");
  std::string dict =
      "{'descr': [('a', '<f4'), ('b', '<f4')], 'fortran_order': False, 'shape': (2,), }";
  dict.append(128 - 10 - dict.size() - 1, ' ');
  dict += '\n';
  std::string hdr = std::string("\x93NUMPY\x01\x00", 8);
  hdr += static_cast<char>(dict.size());
  hdr += '\0';
  const fs::path ps = write_raw("st.npy", hdr + dict, std::string(16, '\0'));
  expect_rejected(ps, Code::kInvalidArgument, "structured dtype");
}

TEST(Npy, RejectsTruncatedData) {
  const fs::path p =
      write_raw("t.npy", npy_header_bytes("<f4", false, {1, 4, 8}), std::string(100, '\0'));
  expect_rejected(p, Code::kDataLoss, "needs 128 bytes, the file has 100");
}

TEST(Npy, RejectsHeaderThatLiesAboutTheShape) {
  // More data than the shape implies.
  const fs::path p =
      write_raw("lie.npy", npy_header_bytes("<f4", false, {2, 2}), std::string(32, '\0'));
  expect_rejected(p, Code::kInvalidArgument, "(16 bytes) but the file has 32 data bytes");
  // An absurd shape whose product overflows.
  const fs::path q = write_raw("huge.npy", npy_header_bytes("<f4", false, {1LL << 40, 1LL << 40}),
                               std::string(16, '\0'));
  expect_rejected(q, Code::kInvalidArgument, "absurd");
}

TEST(Npy, RejectsAbsurdAndTruncatedHeaders) {
  // Version 2 header claiming 1 GB.
  std::string hdr = std::string("\x93NUMPY\x02\x00", 8) + std::string("\x00\x00\x00\x40", 4);
  const fs::path big = write_raw("bighdr.npy", hdr, "{'descr': '<f4'");
  expect_rejected(big, Code::kInvalidArgument, "header length 1073741824 is absurd");
  // A plausible length, but the file ends inside the header.
  const std::string full = npy_header_bytes("<f4", false, {4});
  const fs::path cut = write_raw("cut.npy", full.substr(0, 40), "");
  expect_rejected(cut, Code::kDataLoss, "truncated .npy header");
  const fs::path tiny = write_raw("tiny.npy", std::string("\x93NU", 3), "");
  expect_rejected(tiny, Code::kDataLoss, "truncated");
}

TEST(Npy, RejectsBadMagicVersionAndDict) {
  expect_rejected(write_raw("m.npy", "PK\x03\x04 not numpy at all", ""), Code::kInvalidArgument,
                  "magic");
  std::string v9 = npy_header_bytes("<f4", false, {1});
  v9[6] = 9;
  expect_rejected(write_raw("v9.npy", v9, std::string(4, '\0')), Code::kInvalidArgument,
                  "version 9.0");
  std::string bad = npy_header_bytes("<f4", false, {1});
  bad.replace(bad.find("'shape'"), 7, "'shapo'");
  expect_rejected(write_raw("k.npy", bad, std::string(4, '\0')), Code::kInvalidArgument,
                  "unknown key 'shapo'");
  std::string neg = npy_header_bytes("<f4", false, {1});
  neg.replace(neg.find("(1,)"), 4, "(-1,)");
  expect_rejected(write_raw("neg.npy", neg, std::string(4, '\0')), Code::kInvalidArgument,
                  "malformed");
  std::string missing = "{'descr': '<f4', 'shape': (1,), }";
  missing.append(64 - 10 - missing.size() - 1, ' ');
  missing += '\n';
  std::string hdr = std::string("\x93NUMPY\x01\x00", 8);
  hdr += static_cast<char>(missing.size());
  hdr += '\0';
  expect_rejected(write_raw("miss.npy", hdr + missing, std::string(4, '\0')),
                  Code::kInvalidArgument, "lacks 'fortran_order'");
}

TEST(Npy, MissingFileIsNotFound) {
  const fs::path p = temp_dir() / "nope.npy";
  StatusOr<NpyHeader> h = read_npy_header(p);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), Code::kNotFound);
  EXPECT_TRUE(contains(h.status().message(), p.string()));
}

TEST(Npy, WriterLeavesNothingOnFailure) {
  const fs::path p = temp_dir() / "no_such_folder" / "x.npy";
  const float x = 1;
  const Status s = write_npy(p, {1}, &x);
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), p.string())) << s.message();
  EXPECT_FALSE(fs::exists(p));
}

}  // namespace
}  // namespace qbc::calib
