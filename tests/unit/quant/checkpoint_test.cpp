// The checkpoint folder of resume after a kill (quant/checkpoint.h) and the calibration
// checkpoints in it (quant/calib_checkpoint.h): what is saved loads back bit for bit, and
// anything damaged, cut short, or made for other inputs is never trusted.
#include "qbc/quant/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "qbc/quant/calib_checkpoint.h"
#include "test_support.h"

namespace qbc::quant {
namespace {

namespace fs = std::filesystem;

const std::string kFp(32, 'a');
const std::string kKey(32, 'b');

TEST(CheckpointDir, SavedPayloadLoadsBackOnlyForItsKey) {
  const fs::path dir = testing::temp_dir() / "r";
  auto d = CheckpointDir::open(dir, kFp, "{}");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_FALSE(d->has_checkpoints());
  const std::string payload("x\0y\nz", 5);
  ASSERT_TRUE(d->save("a.ckpt", kKey, payload).ok());
  EXPECT_TRUE(d->has_checkpoints());
  EXPECT_EQ(d->load("a.ckpt", kKey), std::optional<std::string>(payload));
  EXPECT_EQ(d->load("a.ckpt", std::string(32, 'c')), std::nullopt);
  EXPECT_EQ(d->load("missing.ckpt", kKey), std::nullopt);
  // No temporary is left beside it.
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir)) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 2u);  // fingerprint + a.ckpt
}

TEST(CheckpointDir, DamagedOrTruncatedFilesAreIgnored) {
  const fs::path dir = testing::temp_dir() / "r";
  auto d = CheckpointDir::open(dir, kFp, "{}");
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(d->save("a.ckpt", kKey, std::string(1000, 'p')).ok());
  std::string bytes = testing::read_file(dir / "a.ckpt");
  bytes[bytes.size() - 10] ^= 1;  // a flipped payload bit
  testing::write_file(dir / "a.ckpt", bytes);
  EXPECT_EQ(d->load("a.ckpt", kKey), std::nullopt);
  ASSERT_TRUE(d->save("b.ckpt", kKey, std::string(1000, 'p')).ok());
  bytes = testing::read_file(dir / "b.ckpt");
  testing::write_file(dir / "b.ckpt", bytes.substr(0, bytes.size() - 1));  // cut short
  EXPECT_EQ(d->load("b.ckpt", kKey), std::nullopt);
  testing::write_file(dir / "c.ckpt", "");
  EXPECT_EQ(d->load("c.ckpt", kKey), std::nullopt);
}

TEST(CheckpointDir, OtherFingerprintEmptiesTheFolderButKeepsOtherFiles) {
  const fs::path dir = testing::temp_dir() / "r";
  {
    auto d = CheckpointDir::open(dir, kFp, "{}");
    ASSERT_TRUE(d.ok());
    ASSERT_TRUE(d->save("a.ckpt", kKey, "payload").ok());
  }
  fs::create_directories(dir / "work");
  testing::write_file(dir / ".a.ckpt.tmp.123", "half");  // a write a kill cut short
  {
    auto same = CheckpointDir::open(dir, kFp, "{}");
    ASSERT_TRUE(same.ok());
    EXPECT_TRUE(same->load("a.ckpt", kKey).has_value());
    EXPECT_FALSE(fs::exists(dir / ".a.ckpt.tmp.123"));
  }
  auto other = CheckpointDir::open(dir, std::string(32, 'f'), "{}");
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(fs::exists(dir / "a.ckpt"));
  EXPECT_FALSE(other->has_checkpoints());
  EXPECT_TRUE(fs::is_directory(dir / "work"));
  EXPECT_TRUE(testing::contains(testing::read_file(dir / "fingerprint"), std::string(32, 'f')));
}

CalibStats stats_of(const std::string& name, float seed) {
  CalibStats s;
  TensorStats& t = s[name];
  t.absmax = seed * 1.5f;
  t.count = 12;
  t.channel_absmax = {seed, seed / 3.0f, 0.1f};
  t.channel_min = {-seed, -0.2f, -1e-30f};
  t.channel_max = {seed, 0.3f, 7.0f};
  t.pair_radius = {seed * 0.7f};
  t.histogram.assign(kHistogramBins, 0.0);
  t.histogram[3] = seed / 7.0;
  return s;
}

bool same_bits(const CalibStats& a, const CalibStats& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, s] : a) {
    auto it = b.find(name);
    if (it == b.end()) return false;
    const TensorStats& t = it->second;
    auto eq = [](const auto& x, const auto& y) {
      return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0;
    };
    if (std::memcmp(&s.absmax, &t.absmax, sizeof(float)) != 0 || s.count != t.count ||
        !eq(s.channel_absmax, t.channel_absmax) || !eq(s.channel_min, t.channel_min) ||
        !eq(s.channel_max, t.channel_max) || !eq(s.pair_radius, t.pair_radius) ||
        !eq(s.histogram, t.histogram))
      return false;
  }
  return true;
}

TEST(CalibCheckpoint, FinishedBlocksAndTheirStreamLoadBackBitForBit) {
  auto d = CheckpointDir::open(testing::temp_dir() / "r", kFp, "{}");
  ASSERT_TRUE(d.ok());
  const CalibCheckpoint c{&*d, "calibrate"};
  const std::vector<std::vector<float>> input = {{1.0f, 2.0f}, {3.0f, 4.0f, 5.0f, 6.0f}};
  const std::string key = calib_run_key(c, input, {1, 2});
  EXPECT_EQ(key.size(), 32u);
  EXPECT_NE(key, calib_run_key(c, input, {1, 3}));  // other samples, other key
  EXPECT_NE(key, calib_run_key(CalibCheckpoint{&*d, "calibrateScales"}, input, {1, 2}));
  const std::vector<std::vector<float>> after1 = {{0.5f, -0.25f}, {1e-7f, 2.0f, 3.0f, 4.0f}};
  ASSERT_TRUE(save_calib_block(c, key, 0, 4, stats_of("a", 1.0f), input).ok());
  ASSERT_TRUE(save_calib_block(c, key, 1, 4, stats_of("b", 2.0f), after1).ok());
  CalibProgress p = load_calib_progress(c, key, 4, 2);
  EXPECT_EQ(p.next, 2u);
  CalibStats expected = stats_of("a", 1.0f);
  expected.merge(stats_of("b", 2.0f));
  EXPECT_TRUE(same_bits(p.stats, expected));
  EXPECT_EQ(p.stream, after1);
  // Another key (other inputs), or other sample counts: nothing is resumed.
  EXPECT_EQ(load_calib_progress(c, std::string(32, 'e'), 4, 2).next, 0u);
  EXPECT_EQ(load_calib_progress(c, key, 4, 3).next, 0u);
}

TEST(CalibCheckpoint, KillBetweenStatisticsAndStreamCostsOneBlock) {
  auto d = CheckpointDir::open(testing::temp_dir() / "r", kFp, "{}");
  ASSERT_TRUE(d.ok());
  const CalibCheckpoint c{&*d, "calibrate"};
  const std::vector<std::vector<float>> s0 = {{1.0f}}, s1 = {{2.0f}};
  const std::string key = calib_run_key(c, s0, {1});
  ASSERT_TRUE(save_calib_block(c, key, 0, 3, stats_of("a", 1.0f), s0).ok());
  const std::string stream0 = testing::read_file(d->path() / "calibrate.stream.ckpt");
  ASSERT_TRUE(save_calib_block(c, key, 1, 3, stats_of("b", 2.0f), s1).ok());
  // As if killed after block 1's statistics but before its stream replaced block 0's.
  testing::write_file(d->path() / "calibrate.stream.ckpt", stream0);
  CalibProgress p = load_calib_progress(c, key, 3, 1);
  EXPECT_EQ(p.next, 1u);
  EXPECT_TRUE(same_bits(p.stats, stats_of("a", 1.0f)));
  EXPECT_EQ(p.stream, s0);
  // A damaged stream: start over.
  std::string bytes = stream0;
  bytes.back() ^= 0x40;
  testing::write_file(d->path() / "calibrate.stream.ckpt", bytes);
  EXPECT_EQ(load_calib_progress(c, key, 3, 1).next, 0u);
  // Every block done: no stream needed, and none is kept.
  ASSERT_TRUE(save_calib_block(c, key, 2, 3, stats_of("c", 3.0f), s1).ok());
  EXPECT_FALSE(fs::exists(d->path() / "calibrate.stream.ckpt"));
  p = load_calib_progress(c, key, 3, 1);
  EXPECT_EQ(p.next, 3u);
  EXPECT_EQ(p.stats.size(), 3u);
}

}  // namespace
}  // namespace qbc::quant
