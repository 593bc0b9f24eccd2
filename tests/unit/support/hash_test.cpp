#include "qbc/support/hash.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "test_support.h"

namespace qbc {
namespace {

std::string hash_of(const std::string& s) { return xxh3_128_bytes(s.data(), s.size()); }

// Reference digests: the empty input and "abc" as xxHash's own tools print them
// (`xxhsum -H2`); "ClickHouse" and the byte 42 as Python's xxhash.xxh3_128_hexdigest gives them
// (quoted in ClickHouse's xxh3_128 tests).
TEST(HashTest, KnownAnswers) {
  EXPECT_EQ(xxh3_128_bytes(nullptr, 0), "99aa06d3014798d86001c324468d497f");
  EXPECT_EQ(hash_of(""), "99aa06d3014798d86001c324468d497f");
  EXPECT_EQ(hash_of("abc"), "06b05ab6733a618578af5f94892f3950");
  EXPECT_EQ(hash_of("ClickHouse"), "14c27b7bef95d36fecf5520ca2daf030");
  const uint8_t byte = 42;
  EXPECT_EQ(xxh3_128_bytes(&byte, 1), "14c9ae9594c463c479d03016b7aeed0d");
}

TEST(HashTest, SameContentSameHashDifferentContentDifferentHash) {
  EXPECT_EQ(hash_of("hello world"), hash_of(std::string("hello world")));
  EXPECT_NE(hash_of("hello world"), hash_of("hello worle"));
  EXPECT_EQ(hash_of("abc").size(), 32u);
}

// Sizes around the 4 MiB streaming chunk, so chunk boundaries are exercised.
TEST(HashTest, FileHashEqualsBytesHash) {
  const auto dir = testing::temp_dir();
  const std::vector<size_t> sizes = {
      0, 1, 240, 4096, (size_t{4} << 20) - 1, size_t{4} << 20, (size_t{9} << 20) + 17};
  for (size_t size : sizes) {
    std::string data(size, '\0');
    uint32_t x = 12345;
    for (char& c : data) {
      x = x * 1664525u + 1013904223u;
      c = static_cast<char>(x >> 24);
    }
    const auto path = dir / ("f" + std::to_string(size) + ".bin");
    testing::write_file(path, data);
    auto h = xxh3_128_file(path);
    QBC_ASSERT_OK(h);
    EXPECT_EQ(*h, hash_of(data)) << "size " << size;
  }
}

TEST(HashTest, FileErrorsNameThePath) {
  const auto dir = testing::temp_dir();
  auto missing = xxh3_128_file(dir / "nope.bin");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.bin"), std::string::npos);

  auto folder = xxh3_128_file(dir);
  ASSERT_FALSE(folder.ok());
  EXPECT_EQ(folder.status().code(), Code::kInvalidArgument);
  EXPECT_NE(folder.status().message().find(dir.string()), std::string::npos);
}

// Reports throughput only: CI machines are shared, so a hard bound would be flaky. Measured on
// the dev VM from the page cache: 7-9 GB/s.
TEST(HashTest, FileThroughput) {
  const auto path = testing::temp_dir() / "big.bin";
  testing::write_file(path, std::string(size_t{64} << 20, 'x'));
  ASSERT_TRUE(xxh3_128_file(path).ok());  // Warm the page cache.
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(xxh3_128_file(path).ok());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double gbps = (64.0 * (1 << 20)) / 1e9 / s;
  RecordProperty("xxh3_128_file_gb_per_s", std::to_string(gbps));
  std::printf("xxh3_128_file: %.2f GB/s\n", gbps);
}

}  // namespace
}  // namespace qbc
