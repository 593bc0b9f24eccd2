// calib::prepare_calib_dir with the stories260K tokenizer and a synthetic embedding table whose
// rows encode their token id: windows, BOS replacement, determinism, atomic output, errors.
#include "qbc/calib/prepare.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qbc/calib/calib_data.h"
#include "qbc/calib/npy.h"
#include "test_support.h"

namespace qbc::calib {
namespace {

namespace fs = std::filesystem;
using ::qbc::testing::contains;
using ::qbc::testing::read_file;
using ::qbc::testing::temp_dir;
using ::qbc::testing::write_file;

/// Row t is {t, t + 0.5, t + 0.25}: a sample's rows reveal the token ids.
EmbeddingTable id_table(int64_t vocab) {
  EmbeddingTable t;
  t.vocab = vocab;
  t.hidden = 3;
  for (int64_t r = 0; r < vocab; ++r) {
    const float f = static_cast<float>(r);
    t.data.insert(t.data.end(), {f, f + 0.5f, f + 0.25f});
  }
  return t;
}

std::string story_text() {
  std::string s;
  for (int i = 0; i < 20; ++i) {
    s += "Once upon a time, there was a little girl named Lily. She loved to play outside. ";
  }
  return s;
}

class Prepare : public ::testing::Test {
 protected:
  void SetUp() override {
    QBC_REQUIRE_SHARED(dir, "models/stories260k/hf");
    StatusOr<tokenizer::Tokenizer> t = tokenizer::Tokenizer::from_hf_dir(dir);
    QBC_ASSERT_OK(t);
    tok_ = std::make_unique<tokenizer::Tokenizer>(*t);
    root_ = temp_dir();
    write_file(root_ / "text.txt", story_text());
    opt_.text_path = root_ / "text.txt";
    opt_.out_dir = root_ / "out";
    opt_.num_samples = 5;
    opt_.seq_len = 16;
    opt_.seed = 7;
    prov_.model = "stories260k";
    prov_.files = {{"/m/model.safetensors", 123, "00112233445566778899aabbccddeeff"}};
    prov_.producer = "qbc test";
  }
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  fs::path root_;
  PrepareOptions opt_;
  PrepareProvenance prov_;
  EmbeddingTable table_ = id_table(512);
};

TEST(PrepareOffsets, SeededInRangeAndPortable) {
  const std::vector<int64_t> a = pick_window_offsets(100, 10, 50, 3);
  ASSERT_EQ(a.size(), 50u);
  for (int64_t o : a) {
    EXPECT_GE(o, 0);
    EXPECT_LE(o, 90);
  }
  EXPECT_EQ(a, pick_window_offsets(100, 10, 50, 3));
  EXPECT_NE(a, pick_window_offsets(100, 10, 50, 4));
  // splitmix64(seed 0) = 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4: fixed on every machine.
  EXPECT_EQ(pick_window_offsets(1000, 1, 2, 0),
            (std::vector<int64_t>{static_cast<int64_t>(0xe220a8397b1dcdafULL % 1000),
                                  static_cast<int64_t>(0x6e789e6aa1b965f4ULL % 1000)}));
  EXPECT_EQ(pick_window_offsets(10, 10, 3, 9), (std::vector<int64_t>{0, 0, 0}));
  EXPECT_TRUE(pick_window_offsets(9, 10, 3, 9).empty());
}

TEST(PrepareOutputDir, RefusesNonEmptyWithoutForce) {
  const fs::path d = temp_dir();
  QBC_ASSERT_OK(check_output_dir(d / "absent", false));
  QBC_ASSERT_OK(check_output_dir(d, false));  // empty
  write_file(d / "x", "1");
  const Status s = check_output_dir(d, false);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), d.string())) << s.message();
  QBC_ASSERT_OK(check_output_dir(d, true));
  EXPECT_FALSE(check_output_dir("", true).ok());
}

TEST_F(Prepare, WritesSamplesListAndProvenance) {
  StatusOr<PrepareResult> r = prepare_calib_dir(opt_, *tok_, table_, prov_);
  QBC_ASSERT_OK(r);
  EXPECT_TRUE(r->bos_replaced);
  ASSERT_EQ(r->offsets.size(), 5u);
  const std::vector<int32_t> tokens = tok_->encode(story_text(), true);
  EXPECT_EQ(r->num_tokens, static_cast<int64_t>(tokens.size()));
  EXPECT_EQ(
      read_file(opt_.out_dir / "npy_files.txt"),
      "sample_0000.npy\nsample_0001.npy\nsample_0002.npy\nsample_0003.npy\nsample_0004.npy\n");
  for (size_t i = 0; i < 5; ++i) {
    std::vector<float> v;
    std::vector<int64_t> shape;
    QBC_ASSERT_OK(read_npy(r->files[i], &v, &shape));
    EXPECT_EQ(shape, (std::vector<int64_t>{1, 16, 3}));
    EXPECT_EQ(v[0], 1.0f) << "window starts with BOS";
    for (size_t t = 1; t < 16; ++t) {
      EXPECT_EQ(v[t * 3], static_cast<float>(tokens[static_cast<size_t>(r->offsets[i]) + t]))
          << i << " " << t;
      EXPECT_EQ(v[t * 3 + 1], v[t * 3] + 0.5f);
    }
  }
  const nlohmann::json p = nlohmann::json::parse(read_file(opt_.out_dir / "provenance.json"));
  EXPECT_EQ(p["seed"], 7);
  EXPECT_EQ(p["seq_len"], 16);
  EXPECT_EQ(p["num_samples"], 5);
  EXPECT_EQ(p["offsets"].get<std::vector<int64_t>>(), r->offsets);
  EXPECT_EQ(p["text"]["tokens"], r->num_tokens);
  EXPECT_EQ(p["text"]["xxh3_128"].get<std::string>().size(), 32u);
  EXPECT_EQ(p["model"]["files"][0]["xxh3_128"], "00112233445566778899aabbccddeeff");
  EXPECT_EQ(p["producer"], "qbc test");
  // The folder reads back as calibration data.
  StatusOr<CalibDataset> d = open_calib_inputs({opt_.out_dir.string()}, {{"inputs_embeds", 3}});
  QBC_ASSERT_OK(d);
  EXPECT_EQ(d->size(), 5u);
  // Only the output folder is left in its parent: no temporaries.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(root_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"out", "text.txt"}));
}

// Image-text calibration: sample i holds image span i mod 2 right after its first token, then the
// window's text (its tokens from the second on), cut to the sample length; provenance says which
// image each sample holds; a sample too short for a span is refused naming --seq-len.
TEST_F(Prepare, ImageSpansFollowTheFirstTokenAndTheTextFollowsThem) {
  // Span rows are negative (no token row is): span k row j is {-(100k + j + 1), ...}.
  for (int k = 0; k < 2; ++k) {
    std::vector<float> span;
    for (int j = 0; j < 4 + k; ++j) {
      const float f = -static_cast<float>(100 * k + j + 1);
      span.insert(span.end(), {f, f - 0.5f, f - 0.25f});
    }
    opt_.image_spans.push_back(span);
    opt_.image_names.push_back("image" + std::to_string(k) + ".png");
  }
  StatusOr<PrepareResult> r = prepare_calib_dir(opt_, *tok_, table_, prov_);
  QBC_ASSERT_OK(r);
  EXPECT_EQ(r->image_of_sample, (std::vector<int64_t>{0, 1, 0, 1, 0}));
  const std::vector<int32_t> tokens = tok_->encode(story_text(), true);
  for (size_t i = 0; i < 5; ++i) {
    std::vector<float> v;
    std::vector<int64_t> shape;
    QBC_ASSERT_OK(read_npy(r->files[i], &v, &shape));
    EXPECT_EQ(shape, (std::vector<int64_t>{1, 16, 3}));
    EXPECT_EQ(v[0], 1.0f) << "the first token (BOS) stays first";
    const int k = static_cast<int>(i % 2), rows = 4 + k;
    for (int j = 0; j < rows; ++j)
      EXPECT_EQ(v[static_cast<size_t>(1 + j) * 3], -static_cast<float>(100 * k + j + 1))
          << i << " " << j;
    for (int t = 1; t + rows < 16; ++t)  // the window's text from its second token on
      EXPECT_EQ(v[static_cast<size_t>(t + rows) * 3],
                static_cast<float>(tokens[static_cast<size_t>(r->offsets[i]) + t]))
          << i << " " << t;
  }
  const nlohmann::json p = nlohmann::json::parse(read_file(opt_.out_dir / "provenance.json"));
  EXPECT_EQ(p["images"][1]["file"], "image1.png");
  EXPECT_EQ(p["images"][1]["rows"], 5);
  EXPECT_EQ(p["image_of_sample"].get<std::vector<int64_t>>(), r->image_of_sample);

  PrepareOptions short_o = opt_;
  short_o.out_dir = root_ / "short";
  short_o.seq_len = 6;  // the 5-row span needs 7
  const StatusOr<PrepareResult> s = prepare_calib_dir(short_o, *tok_, table_, prov_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(contains(s.status().message(), "--seq-len 6 holds no image")) << s.status().message();
  EXPECT_TRUE(contains(s.status().message(), "image1.png is 5 rows")) << s.status().message();
  EXPECT_FALSE(fs::exists(short_o.out_dir));
  PrepareOptions ragged = opt_;
  ragged.out_dir = root_ / "ragged";
  ragged.image_spans[0].pop_back();  // not whole rows
  EXPECT_EQ(prepare_calib_dir(ragged, *tok_, table_, prov_).status().code(),
            Code::kInvalidArgument);
}

TEST_F(Prepare, SameInputsSameBytes) {
  QBC_ASSERT_OK(prepare_calib_dir(opt_, *tok_, table_, prov_));
  PrepareOptions o2 = opt_;
  o2.out_dir = root_ / "out2";
  QBC_ASSERT_OK(prepare_calib_dir(o2, *tok_, table_, prov_));
  for (const char* f : {"sample_0000.npy", "sample_0004.npy", "npy_files.txt", "provenance.json"}) {
    EXPECT_EQ(read_file(opt_.out_dir / f), read_file(o2.out_dir / f)) << f;
  }
}

TEST_F(Prepare, RefusesNonEmptyFolderUnlessForced) {
  write_file(opt_.out_dir / "keep.txt", "x");
  StatusOr<PrepareResult> r = prepare_calib_dir(opt_, *tok_, table_, prov_);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), "--force")) << r.status().message();
  EXPECT_TRUE(fs::exists(opt_.out_dir / "keep.txt"));
  opt_.force = true;
  QBC_ASSERT_OK(prepare_calib_dir(opt_, *tok_, table_, prov_));
  EXPECT_FALSE(fs::exists(opt_.out_dir / "keep.txt"));
  EXPECT_TRUE(fs::exists(opt_.out_dir / "sample_0004.npy"));
  // An empty existing folder is fine without --force.
  fs::create_directories(root_ / "empty");
  opt_.out_dir = root_ / "empty";
  opt_.force = false;
  QBC_ASSERT_OK(prepare_calib_dir(opt_, *tok_, table_, prov_));
  // A file where the folder should be is refused even with --force.
  write_file(root_ / "afile", "x");
  EXPECT_FALSE(check_output_dir(root_ / "afile", true).ok());
}

TEST_F(Prepare, ShortTextNamesFileAndTokenCount) {
  write_file(root_ / "short.txt", "Once upon a time.");
  opt_.text_path = root_ / "short.txt";
  StatusOr<PrepareResult> r = prepare_calib_dir(opt_, *tok_, table_, prov_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  const std::string n = std::to_string(tok_->encode("Once upon a time.", true).size());
  EXPECT_TRUE(contains(r.status().message(), (root_ / "short.txt").string() + ": " + n + " tokens"))
      << r.status().message();
  EXPECT_FALSE(fs::exists(opt_.out_dir));
}

TEST_F(Prepare, MissingTextAndSmallTableFail) {
  opt_.text_path = root_ / "nope.txt";
  StatusOr<PrepareResult> r = prepare_calib_dir(opt_, *tok_, table_, prov_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound);
  EXPECT_TRUE(contains(r.status().message(), "nope.txt"));
  opt_.text_path = root_ / "text.txt";
  r = prepare_calib_dir(opt_, *tok_, id_table(100), prov_);  // ids up to 511 do not fit
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), "embedding table of 100 rows"))
      << r.status().message();
  EXPECT_FALSE(fs::exists(opt_.out_dir));
}

}  // namespace
}  // namespace qbc::calib
