// `qbc calib prepare`'s driver function (qbc/driver/calib_prepare.h) on a tiny random model:
// the cheap checks before any model is read, the folder it writes and what it reports.
#include "qbc/driver/calib_prepare.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "qbc/driver/random_model.h"
#include "test_support.h"

namespace qbc::driver {
namespace {

namespace fs = std::filesystem;
using qbc::testing::contains;
using qbc::testing::read_file;
using qbc::testing::temp_dir;
using qbc::testing::write_file;

CalibPrepareRequest request(const fs::path& dir) {
  CalibPrepareRequest r;
  r.model = (dir / "model").string();
  r.text = (dir / "text.txt").string();
  r.output = (dir / "calib").string();
  return r;
}

TEST(CalibPrepare, MissingTextIsNotFoundBeforeTheModelIsRead) {
  CalibPrepareRequest r = request(temp_dir());
  r.model = "/nonexistent/model";
  const Status s = check_calib_prepare(r);
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_TRUE(contains(s.message(), r.text)) << s.message();
  EXPECT_TRUE(contains(s.message(), "--text")) << s.message();
}

TEST(CalibPrepare, NonEmptyOutputNeedsForce) {
  const fs::path dir = temp_dir();
  CalibPrepareRequest r = request(dir);
  write_file(r.text, "some text");
  write_file(fs::path(r.output) / "old.npy", "x");
  EXPECT_EQ(check_calib_prepare(r).code(), Code::kInvalidArgument);
  r.force = true;
  QBC_ASSERT_OK(check_calib_prepare(r));
}

TEST(CalibPrepare, WritesTheSamplesOfATinyModel) {
  const fs::path dir = temp_dir();
  RandomModelRequest m;
  m.tiny = true;
  m.output = (dir / "model").string();
  QBC_ASSERT_OK(write_random_model(m));
  std::string text;
  for (int i = 0; i < 40; ++i)
    text += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
  write_file(dir / "text.txt", text);

  CalibPrepareRequest r = request(dir);
  r.num_samples = 3;
  r.seq_len = 16;
  r.producer = "unit test";
  QBC_ASSERT_OK(check_calib_prepare(r));
  config::LoadRequest lr;
  lr.sets = {"seed=11"};
  auto cfg = config::resolve(lr);
  QBC_ASSERT_OK(cfg);
  auto res = prepare_calib(r, *cfg);
  QBC_ASSERT_OK(res);
  EXPECT_EQ(res->samples, 3);
  EXPECT_EQ(res->seq_len, 16);
  EXPECT_EQ(res->hidden, 64);  // the tiny Llama's hidden size
  EXPECT_EQ(res->seed, 11u);
  EXPECT_GE(res->text_tokens, 16);
  // Three float32 [1, 16, 64] samples (a .npy header, then 16 * 64 * 4 bytes each).
  for (const char* f : {"sample_0000.npy", "sample_0001.npy", "sample_0002.npy"}) {
    ASSERT_TRUE(fs::exists(dir / "calib" / f)) << f;
    EXPECT_GT(fs::file_size(dir / "calib" / f), 16u * 64u * 4u);
  }
  EXPECT_FALSE(fs::exists(dir / "calib" / "sample_0003.npy"));
  const nlohmann::json prov = nlohmann::json::parse(read_file(dir / "calib" / "provenance.json"));
  EXPECT_TRUE(contains(prov.dump(), "unit test")) << prov.dump();

  const nlohmann::json j = nlohmann::json::parse(calib_prepare_json(*res));
  EXPECT_EQ(j["shape"], nlohmann::json({1, 16, 64}));
  EXPECT_EQ(j["samples"], 3);
  EXPECT_EQ(calib_prepare_text(*res), "wrote 3 samples [1, 16, 64] float32 to " + r.output + " (" +
                                          std::to_string(res->text_tokens) +
                                          " text tokens, seed 11)\n");
}

}  // namespace
}  // namespace qbc::driver
