// M-RoPE host glue (qbc/runner/mrope.h). The expected positions are worked out by hand from
// transformers' Qwen2_5_VLModel.get_rope_index (images, second_per_grid_t = 0):
//   st_idx    = previous chunk's max + 1 (0 at the start)
//   text      = arange(text_len) + st_idx                        in all three streams
//   image     = (t_index, h_index, w_index) + text_len + st_idx  (t_index = 0 for one frame)
//   delta     = max(all) + 1 - len(tokens)
// and the tables from Qwen2_5_VLRotaryEmbedding (inv_freq_i = theta^(-2i/d)) with
// apply_multimodal_rotary_pos_emb's section split.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "qbc/runner/mrope.h"
#include "test_support.h"

namespace qbc::runner {
namespace {

constexpr int32_t kImg = 9;  // the image placeholder id in these prompts

std::vector<int64_t> cat3(const std::vector<int64_t>& t, const std::vector<int64_t>& h,
                          const std::vector<int64_t>& w) {
  std::vector<int64_t> out = t;
  out.insert(out.end(), h.begin(), h.end());
  out.insert(out.end(), w.begin(), w.end());
  return out;
}

TEST(MRopePositions, TextImageText) {
  // a b <vs> [2 x 3 image] <ve> c d: text 0..2, the image from base 3, text resumes at 6.
  const std::vector<int32_t> tokens = {1, 2, 3, kImg, kImg, kImg, kImg, kImg, kImg, 4, 5, 6};
  const auto p = mrope_positions(tokens, kImg, {{1, 2, 3}});
  QBC_ASSERT_OK(p);
  EXPECT_EQ(p->positions, cat3({0, 1, 2, 3, 3, 3, 3, 3, 3, 6, 7, 8},  //
                               {0, 1, 2, 3, 3, 3, 4, 4, 4, 6, 7, 8},  //
                               {0, 1, 2, 3, 4, 5, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(p->delta, 8 + 1 - 12);
}

TEST(MRopePositions, TwoImagesTallThenWide) {
  // a [3 x 1] b [1 x 2] c: the first image's max is its height (3 rows from base 1 -> 3), so
  // b is at 4; the second image from base 5 reaches 6 in the width stream, so c is at 7.
  const std::vector<int32_t> tokens = {1, kImg, kImg, kImg, 2, kImg, kImg, 3};
  const auto p = mrope_positions(tokens, kImg, {{1, 3, 1}, {1, 1, 2}});
  QBC_ASSERT_OK(p);
  EXPECT_EQ(p->positions, cat3({0, 1, 1, 1, 4, 5, 5, 7},  //
                               {0, 1, 2, 3, 4, 5, 5, 7},  //
                               {0, 1, 1, 1, 4, 5, 6, 7}));
  EXPECT_EQ(p->delta, 0);
}

TEST(MRopePositions, ImageFirstAndTextOnly) {
  const auto p = mrope_positions({kImg, kImg, kImg, kImg}, kImg, {{1, 2, 2}});
  QBC_ASSERT_OK(p);
  EXPECT_EQ(p->positions, cat3({0, 0, 0, 0}, {0, 0, 1, 1}, {0, 1, 0, 1}));
  EXPECT_EQ(p->delta, 1 + 1 - 4);
  const auto t = mrope_positions({5, 6, 7}, kImg, {});
  QBC_ASSERT_OK(t);
  EXPECT_EQ(t->positions, cat3({0, 1, 2}, {0, 1, 2}, {0, 1, 2}));
  EXPECT_EQ(t->delta, 0);
  // Decode after the first prompt: sequence index 4 -> position 4 + delta = 2 everywhere.
  EXPECT_EQ(mrope_text_positions(4, 2, -2), cat3({2, 3}, {2, 3}, {2, 3}));
}

TEST(MRopePositions, MismatchedPlaceholdersAreRefused) {
  const auto expect = [](const StatusOr<MRopePositions>& p, Code code, const char* part) {
    ASSERT_FALSE(p.ok());
    EXPECT_EQ(p.status().code(), code) << p.status().to_string();
    EXPECT_NE(p.status().message().find(part), std::string::npos) << p.status().to_string();
  };
  // Three placeholders for a 2 x 2 grid; a stray placeholder after the last image; no image
  // token at all; a two-frame grid (video).
  expect(mrope_positions({1, kImg, kImg, kImg, 2}, kImg, {{1, 2, 2}}), Code::kInvalidArgument,
         "token 4 is not the image token");
  expect(mrope_positions({kImg, 1, kImg}, kImg, {{1, 1, 1}}), Code::kInvalidArgument,
         "token 2 is an image token");
  expect(mrope_positions({1, 2}, kImg, {{1, 1, 1}}), Code::kInvalidArgument, "no image token");
  expect(mrope_positions({kImg, kImg}, kImg, {{2, 1, 1}}), Code::kUnimplemented, "video");
}

TEST(MRopeTables, SectionsPickTheStreams) {
  // head_dim 8, sections [1, 1, 2], theta 100: inv_freq_i = 100^(-i/4); frequency 0 follows t,
  // 1 follows h, 2 and 3 follow w.
  MRopeSpec spec;
  spec.head_dim = 8;
  spec.theta = 100.0;
  spec.section = {1, 1, 2};
  std::vector<double> c, s;
  mrope_tables(spec, cat3({3, 0}, {5, 1}, {7, 2}), &c, &s);
  ASSERT_EQ(c.size(), 8u);
  const double want[2][4] = {{3.0, 5.0 / std::sqrt(10.0), 7.0 / 10.0, 7.0 / std::pow(10.0, 1.5)},
                             {0.0, 1.0 / std::sqrt(10.0), 2.0 / 10.0, 2.0 / std::pow(10.0, 1.5)}};
  for (int t = 0; t < 2; ++t) {
    for (int i = 0; i < 4; ++i) {
      EXPECT_NEAR(c[t * 4 + i], std::cos(want[t][i]), 1e-15) << t << " " << i;
      EXPECT_NEAR(s[t * 4 + i], std::sin(want[t][i]), 1e-15) << t << " " << i;
    }
  }
}

// Qwen3-VL (interleaved): transformers' apply_interleaved_mrope keeps freqs[0] and writes
// freqs[1] into slice(1, 3 * section[1], 3), freqs[2] into slice(2, 3 * section[2], 3). With
// head_dim 12 (6 frequencies) and sections [2, 2, 2]: t at 0 and 3, h at 1 and 4, w at 2 and 5.
TEST(MRopeTables, InterleavedStreamsTakeTheFrequenciesInTurn) {
  MRopeSpec spec;
  spec.head_dim = 12;
  spec.theta = 64.0;  // inv_freq_i = 64^(-i/6) = 2^-i
  spec.section = {2, 2, 2};
  spec.interleaved = true;
  std::vector<double> c, s;
  mrope_tables(spec, cat3({3}, {5}, {7}), &c, &s);
  ASSERT_EQ(c.size(), 6u);
  const double pos[6] = {3, 5, 7, 3, 5, 7};
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(c[i], std::cos(pos[i] / std::pow(2.0, i)), 1e-15) << i;
    EXPECT_NEAR(s[i], std::sin(pos[i] / std::pow(2.0, i)), 1e-15) << i;
  }
  // Qwen3-VL-4B's [24, 20, 20] over 64 frequencies: h at 1, 4, ..., 58, w at 2, 5, ..., 59, t at
  // 0, 3, ..., 57 and the last four (60..63).
  spec.head_dim = 128;
  spec.section = {24, 20, 20};
  int count[3] = {0, 0, 0};
  for (int64_t i = 0; i < 64; ++i) {
    const int64_t want = i >= 60 ? 0 : i % 3;
    EXPECT_EQ(mrope_stream(spec, i), want) << i;
    ++count[mrope_stream(spec, i)];
  }
  EXPECT_EQ(count[0], 24);
  EXPECT_EQ(count[1], 20);
  EXPECT_EQ(count[2], 20);
  spec.interleaved = false;  // sectioned: the first 24 t, the next 20 h, the last 20 w
  for (int64_t i : {0, 23, 24, 43, 44, 63})
    EXPECT_EQ(mrope_stream(spec, i), i < 24 ? 0 : i < 44 ? 1 : 2) << i;
}

TEST(MRopeTables, SpecFromGraphMetadata) {
  std::map<std::string, std::string> m = {
      {"mrope.section", "16,24,24"}, {"mrope.theta", "1000000"}, {"mrope.head_dim", "128"}};
  const auto spec = mrope_spec_from_metadata(m);
  QBC_ASSERT_OK(spec);
  EXPECT_EQ(spec->head_dim, 128);
  EXPECT_EQ(spec->theta, 1e6);
  EXPECT_EQ(spec->section, (std::array<int64_t, 3>{16, 24, 24}));
  EXPECT_FALSE(spec->interleaved);
  m["mrope.interleaved"] = "1";
  EXPECT_TRUE(mrope_spec_from_metadata(m)->interleaved);
  m["mrope.interleaved"] = "yes";
  const Status bad = mrope_spec_from_metadata(m).status();
  EXPECT_EQ(bad.code(), Code::kInvalidArgument);
  EXPECT_NE(bad.message().find("mrope.interleaved"), std::string::npos) << bad.to_string();
  m.erase("mrope.interleaved");
  m["mrope.section"] = "16,24";
  EXPECT_EQ(mrope_spec_from_metadata(m).status().code(), Code::kInvalidArgument);
  m["mrope.section"] = "16,24,25";
  EXPECT_EQ(mrope_spec_from_metadata(m).status().code(), Code::kInvalidArgument);
  m.erase("mrope.section");
  EXPECT_EQ(mrope_spec_from_metadata(m).status().code(), Code::kNotFound);
}

// One forward call: text positions shifted by the delta, or the given positions, which then set
// the delta for the text after them (HF rope_deltas).
TEST(MRopeTables, CallTablesFromTextOrGivenPositions) {
  MRopeSpec spec;
  spec.head_dim = 8;
  spec.section = {2, 1, 1};
  std::vector<double> c, s, want_c, want_s;
  int64_t delta = -2;
  QBC_ASSERT_OK(mrope_call_tables(spec, 4, 2, nullptr, &delta, &c, &s));
  mrope_tables(spec, cat3({2, 3}, {2, 3}, {2, 3}), &want_c, &want_s);
  EXPECT_EQ(c, want_c);
  EXPECT_EQ(s, want_s);
  EXPECT_EQ(delta, -2) << "text positions leave the delta alone";
  const std::vector<int64_t> given = cat3({0, 1, 1}, {0, 0, 1}, {0, 1, 0});
  QBC_ASSERT_OK(mrope_call_tables(spec, 0, 3, &given, &delta, &c, &s));
  mrope_tables(spec, given, &want_c, &want_s);
  EXPECT_EQ(c, want_c);
  EXPECT_EQ(delta, 2 - 3) << "largest position 1, so the next text token (index 3) sits at 2";
  const std::vector<int64_t> short_given = cat3({0}, {0}, {0});
  const Status bad = mrope_call_tables(spec, 3, 2, &short_given, &delta, &c, &s);
  EXPECT_EQ(bad.code(), Code::kInvalidArgument);
  EXPECT_NE(bad.message().find("3 values for 3 streams of 2 tokens"), std::string::npos)
      << bad.message();
  EXPECT_EQ(delta, -1) << "a refused call leaves the delta alone";
}

}  // namespace
}  // namespace qbc::runner
