// Hostile image files (docs/multimodal.md, "Limits"): truncated, zero-size, huge declared
// dimensions, bad CRCs, CMYK, and a seeded mutation round over a PNG and a JPEG. Each is a
// Status naming the file (exit 2), never kInternal, never a crash, never an allocation beyond
// the limits (a 100000 x 100000 header would need 30 GB).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "image_writers.h"
#include "qbc/image/image.h"
#include "qbc/image/preprocess.h"
#include "qbc/support/exit_codes.h"
#include "test_support.h"

namespace qbc::image {
namespace {

namespace img = testing::img;

Status decode(const std::string& bytes) {
  const StatusOr<Image> r = decode_bytes(reinterpret_cast<const uint8_t*>(bytes.data()),
                                         bytes.size(), "hostile.img", DecodeLimits{});
  return r.status();
}

// A refusal a user can act on: exit 2, naming the file, short.
void expect_bad_input(const Status& s, const std::string& what) {
  ASSERT_FALSE(s.ok()) << what;
  EXPECT_EQ(exit_code_for(s), kExitBadInput) << what << ": " << s.to_string();
  EXPECT_TRUE(testing::contains(s.message(), "hostile.img")) << what << ": " << s.message();
  EXPECT_LT(s.message().size(), 600u) << what;
}

std::string small_png() {
  std::vector<std::string> rows;
  for (int y = 0; y < 8; ++y) {
    std::string r;
    for (int x = 0; x < 8 * 3; ++x) r += static_cast<char>(y * 31 + x * 7);
    rows.push_back(r);
  }
  return img::png_file(8, 8, 8, 2, rows);
}

std::string small_jpeg() {
  std::vector<uint8_t> px;
  for (int i = 0; i < 16 * 16 * 3; ++i) px.push_back(static_cast<uint8_t>(i * 13));
  return img::jpeg_file(16, 16, 3, JCS_RGB, px, 90);
}

TEST(ImageHostileTest, ZeroSizeFile) {
  const Status s = decode("");
  expect_bad_input(s, "empty");
  EXPECT_TRUE(testing::contains(s.message(), "empty")) << s.message();
}

TEST(ImageHostileTest, NotAnImage) {
  const Status s = decode("GIF89a\x01\x00\x01\x00");
  expect_bad_input(s, "gif");
  EXPECT_TRUE(testing::contains(s.message(), "not a PNG or JPEG")) << s.message();
}

TEST(ImageHostileTest, EveryTruncationOfAPngIsRefused) {
  const std::string f = small_png();
  QBC_ASSERT_OK(decode(f));
  for (size_t n = 1; n < f.size(); ++n)
    expect_bad_input(decode(f.substr(0, n)), "png cut at " + std::to_string(n));
  EXPECT_TRUE(testing::contains(decode(f.substr(0, f.size() - 20)).message(), "truncated"));
}

TEST(ImageHostileTest, EveryTruncationOfAJpegIsRefused) {
  const std::string f = small_jpeg();
  QBC_ASSERT_OK(decode(f));
  for (size_t n = 1; n < f.size(); ++n)
    expect_bad_input(decode(f.substr(0, n)), "jpeg cut at " + std::to_string(n));
  EXPECT_TRUE(testing::contains(decode(f.substr(0, f.size() / 2)).message(), "truncated"));
}

TEST(ImageHostileTest, HugeDeclaredPngDimensionsAreRefusedFromTheHeader) {
  struct Case {
    uint32_t w, h;
    const char* says;
  };
  for (const Case& c : {Case{100000, 100000, "16384 pixels per side"},
                        Case{16384, 16384, "more than the limit of 67108864"},
                        Case{0x7fffffff, 1, "16384 pixels per side"}}) {
    const std::string f = img::png_file(c.w, c.h, 8, 2, {std::string(6, '\0')});
    const Status s = decode(f);
    expect_bad_input(s, std::to_string(c.w) + "x" + std::to_string(c.h));
    EXPECT_TRUE(testing::contains(s.message(), c.says)) << s.message();
  }
}

TEST(ImageHostileTest, ZeroPngDimensionIsRefused) {
  expect_bad_input(decode(img::png_file(0, 4, 8, 2, {std::string(1, '\0')})), "zero width");
}

TEST(ImageHostileTest, HugeDeclaredJpegDimensionsAreRefusedFromTheHeader) {
  std::string f = small_jpeg();
  // The baseline SOF0 marker FF C0: length (2), precision (1), height (2), width (2).
  const size_t sof = f.find("\xff\xc0");
  ASSERT_NE(sof, std::string::npos);
  f[sof + 5] = static_cast<char>(0xea);  // height 60000
  f[sof + 6] = static_cast<char>(0x60);
  f[sof + 7] = static_cast<char>(0xea);  // width 60000
  f[sof + 8] = static_cast<char>(0x60);
  const Status s = decode(f);
  expect_bad_input(s, "jpeg 60000x60000");
  EXPECT_TRUE(testing::contains(s.message(), "60000 x 60000")) << s.message();
}

TEST(ImageHostileTest, CmykJpegIsExit2) {
  const std::vector<uint8_t> px(8 * 8 * 4, 7);
  const Status s = decode(img::jpeg_file(8, 8, 4, JCS_CMYK, px));
  expect_bad_input(s, "cmyk");
  EXPECT_TRUE(testing::contains(s.message(), "CMYK")) << s.message();
}

TEST(ImageHostileTest, SixteenBitPngIsConvertedNotRefused) {
  const std::string f = img::png_file(1, 1, 16, 2, {std::string(6, '\x80')});
  QBC_ASSERT_OK(decode(f));
}

TEST(ImageHostileTest, BadChunkCrcIsRefused) {
  std::string f = small_png();
  f[8 + 8 + 13] ^= 1;  // the last byte of IHDR's data: its CRC no longer matches
  const Status s = decode(f);
  expect_bad_input(s, "crc");
  EXPECT_TRUE(testing::contains(s.message(), "CRC")) << s.message();
}

// Random byte flips, insertions and cuts of both formats, decoded and (when they decode)
// preprocessed: each is OK or a bad-input Status.
TEST(ImageHostileTest, SeededMutationRound) {
  const StatusOr<PreprocessSpec> spec = parse_preprocess_spec(
      R"({"image_processor_type": "Qwen2VLImageProcessor", "min_pixels": 784,
          "max_pixels": 3136})",
      "spec");
  QBC_ASSERT_OK(spec);
  std::mt19937 rng(26);
  int decoded = 0;
  for (const std::string& seed : {small_png(), small_jpeg()}) {
    for (int i = 0; i < 400; ++i) {
      std::string f = seed;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits; ++e) {
        const size_t at = rng() % f.size();
        switch (rng() % 3) {
          case 0:
            f[at] = static_cast<char>(rng());
            break;
          case 1:
            f.insert(at, 1, static_cast<char>(rng()));
            break;
          default:
            f.resize(std::max<size_t>(at, 1));
            break;
        }
      }
      const StatusOr<Image> im = decode_bytes(reinterpret_cast<const uint8_t*>(f.data()), f.size(),
                                              "hostile.img", DecodeLimits{});
      if (!im.ok()) {
        expect_bad_input(im.status(), "mutation " + std::to_string(i));
        continue;
      }
      ++decoded;
      const StatusOr<Pixels> px = preprocess(*im, *spec, "hostile.img");
      QBC_ASSERT_OK(px);
      EXPECT_EQ(px->shape.size(), 2u);
    }
  }
  EXPECT_GT(decoded, 0) << "no mutation decoded: the round tests only the refusals";
}

}  // namespace
}  // namespace qbc::image
