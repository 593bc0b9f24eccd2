// The PNG and JPEG decoders (qbc/image/image.h) on inputs written by the writers of
// image_writers.h, and on the shared photographs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "image_writers.h"
#include "qbc/image/image.h"
#include "test_support.h"

namespace qbc::image {
namespace {

namespace img = testing::img;

StatusOr<Image> decode(const std::string& bytes, const DecodeLimits& limits = {}) {
  return decode_bytes(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "x.img",
                      limits);
}

std::string bytes(std::initializer_list<int> v) {
  std::string s;
  for (int b : v) s += static_cast<char>(b);
  return s;
}

void expect_rgb(const Image& im, int32_t w, int32_t h, const std::vector<int>& rgb) {
  ASSERT_EQ(im.width, w);
  ASSERT_EQ(im.height, h);
  ASSERT_EQ(im.rgb.size(), rgb.size());
  for (size_t i = 0; i < rgb.size(); ++i) EXPECT_EQ(im.rgb[i], rgb[i]) << "byte " << i;
}

TEST(PngDecodeTest, Rgb8IsReadAsWritten) {
  const std::string f = img::png_file(
      3, 2, 8, 2,
      {bytes({1, 2, 3, 4, 5, 6, 7, 8, 9}), bytes({250, 251, 252, 0, 128, 255, 10, 20, 30})});
  QBC_ASSERT_OK(decode(f));
  expect_rgb(*decode(f), 3, 2, {1, 2, 3, 4, 5, 6, 7, 8, 9, 250, 251, 252, 0, 128, 255, 10, 20, 30});
}

TEST(PngDecodeTest, Gray8ExpandsToEqualChannels) {
  const std::string f = img::png_file(2, 1, 8, 0, {bytes({17, 200})});
  QBC_ASSERT_OK(decode(f));
  expect_rgb(*decode(f), 2, 1, {17, 17, 17, 200, 200, 200});
}

TEST(PngDecodeTest, Gray1BitExpandsToBlackAndWhite) {
  // Bits 1,0,1 (MSB first) padded to a byte: 0b10100000.
  const std::string f = img::png_file(3, 1, 1, 0, {bytes({0xa0})});
  QBC_ASSERT_OK(decode(f));
  expect_rgb(*decode(f), 3, 1, {255, 255, 255, 0, 0, 0, 255, 255, 255});
}

TEST(PngDecodeTest, PaletteExpandsAndTransparencyIsDropped) {
  const std::string plte = img::png_chunk("PLTE", bytes({10, 20, 30, 40, 50, 60}));
  const std::string trns = img::png_chunk("tRNS", bytes({0, 128}));
  const std::string f = img::png_file(3, 1, 8, 3, {bytes({1, 0, 1})}, plte + trns);
  QBC_ASSERT_OK(decode(f));
  expect_rgb(*decode(f), 3, 1, {40, 50, 60, 10, 20, 30, 40, 50, 60});
}

TEST(PngDecodeTest, AlphaIsDroppedNotComposited) {
  const std::string rgba = img::png_file(2, 1, 8, 6, {bytes({1, 2, 3, 0, 4, 5, 6, 255})});
  QBC_ASSERT_OK(decode(rgba));
  expect_rgb(*decode(rgba), 2, 1, {1, 2, 3, 4, 5, 6});
  const std::string gray_alpha = img::png_file(1, 1, 8, 4, {bytes({99, 7})});
  QBC_ASSERT_OK(decode(gray_alpha));
  expect_rgb(*decode(gray_alpha), 1, 1, {99, 99, 99});
}

TEST(PngDecodeTest, SixteenBitKeepsTheHighByte) {
  const std::string rgb16 =
      img::png_file(1, 1, 16, 2, {bytes({0x12, 0x34, 0xff, 0xff, 0x00, 0xff})});
  QBC_ASSERT_OK(decode(rgb16));
  expect_rgb(*decode(rgb16), 1, 1, {0x12, 0xff, 0x00});
  const std::string gray16 = img::png_file(2, 1, 16, 0, {bytes({0xab, 0xcd, 0x01, 0x80})});
  QBC_ASSERT_OK(decode(gray16));
  expect_rgb(*decode(gray16), 2, 1, {0xab, 0xab, 0xab, 0x01, 0x01, 0x01});
}

TEST(PngDecodeTest, Adam7InterlaceIsUndone) {
  // A 2 x 2 gray image interlaced: pass 1 holds (0,0), pass 6 (0,1), pass 7 row 1; the other
  // passes are empty for this size (PNG spec, "Adam7 interlace"). Each pass row has its filter
  // byte.
  const std::string raw = bytes({0, 10, 0, 20, 0, 30, 40});
  const std::string f = "\x89PNG\r\n\x1a\n" + img::png_ihdr(2, 2, 8, 0, 1) +
                        img::png_chunk("IDAT", img::zlib_compress(raw)) +
                        img::png_chunk("IEND", "");
  QBC_ASSERT_OK(decode(f));
  expect_rgb(*decode(f), 2, 2, {10, 10, 10, 20, 20, 20, 30, 30, 30, 40, 40, 40});
}

TEST(JpegDecodeTest, FlatRgbDecodesToItsColour) {
  std::vector<uint8_t> px;
  for (int i = 0; i < 16 * 16; ++i) px.insert(px.end(), {200, 100, 50});
  const StatusOr<Image> im = decode(img::jpeg_file(16, 16, 3, JCS_RGB, px));
  QBC_ASSERT_OK(im);
  ASSERT_EQ(im->width, 16);
  ASSERT_EQ(im->height, 16);
  for (size_t i = 0; i < im->rgb.size(); ++i) EXPECT_NEAR(im->rgb[i], px[i], 2) << "byte " << i;
}

TEST(JpegDecodeTest, GrayscaleExpandsToEqualChannels) {
  std::vector<uint8_t> px(8 * 8);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i < 32 ? 40 : 220);
  const StatusOr<Image> im = decode(img::jpeg_file(8, 8, 1, JCS_GRAYSCALE, px));
  QBC_ASSERT_OK(im);
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 8; ++x) {
      EXPECT_EQ(im->at(y, x, 0), im->at(y, x, 1));
      EXPECT_EQ(im->at(y, x, 0), im->at(y, x, 2));
      EXPECT_NEAR(im->at(y, x, 0), px[static_cast<size_t>(y * 8 + x)], 12);
    }
}

TEST(JpegDecodeTest, CmykIsRefusedNamingIt) {
  const std::vector<uint8_t> px(8 * 8 * 4, 100);
  const StatusOr<Image> im = decode(img::jpeg_file(8, 8, 4, JCS_CMYK, px));
  ASSERT_FALSE(im.ok());
  EXPECT_EQ(im.status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(testing::contains(im.status().message(), "x.img")) << im.status().message();
  EXPECT_TRUE(testing::contains(im.status().message(), "CMYK")) << im.status().message();
}

TEST(DecodeTest, LimitsAreCheckedFromTheHeader) {
  const std::string f = img::png_file(3, 2, 8, 0, {bytes({1, 2, 3}), bytes({4, 5, 6})});
  DecodeLimits side;
  side.max_side = 2;
  const StatusOr<Image> a = decode(f, side);
  ASSERT_FALSE(a.ok());
  EXPECT_TRUE(testing::contains(a.status().message(), "limit of 2 pixels per side"))
      << a.status().message();
  DecodeLimits pixels;
  pixels.max_pixels = 5;
  const StatusOr<Image> b = decode(f, pixels);
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(testing::contains(b.status().message(), "6 pixels, more than the limit of 5"))
      << b.status().message();
}

TEST(DecodeTest, ReadsFilesAndNamesThemInErrors) {
  const auto dir = testing::temp_dir();
  testing::write_file(dir / "a.png", img::png_file(1, 1, 8, 0, {bytes({9})}));
  const StatusOr<Image> ok = decode_file((dir / "a.png").string());
  QBC_ASSERT_OK(ok);
  expect_rgb(*ok, 1, 1, {9, 9, 9});
  const StatusOr<Image> missing = decode_file((dir / "b.png").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_TRUE(testing::contains(missing.status().message(), "b.png"));
}

// The shared photographs (their README gives format and size).
TEST(DecodeTest, SharedPhotographsDecodeToTheirSizes) {
  struct Case {
    const char* file;
    int32_t width, height;
    bool gray;
  };
  for (const Case& c : {Case{"chelsea.png", 451, 300, false}, Case{"rocket.jpg", 640, 427, false},
                        Case{"camera.png", 512, 512, true}, Case{"gravel.png", 512, 512, true}}) {
    QBC_REQUIRE_SHARED(path, std::string("data/images/") + c.file);
    const StatusOr<Image> im = decode_file(path.string());
    QBC_ASSERT_OK(im);
    EXPECT_EQ(im->width, c.width) << c.file;
    EXPECT_EQ(im->height, c.height) << c.file;
    ASSERT_EQ(im->rgb.size(), static_cast<size_t>(c.width) * c.height * 3);
    bool all_gray = true;
    int lo = 255, hi = 0;
    for (size_t i = 0; i < im->rgb.size(); i += 3) {
      all_gray = all_gray && im->rgb[i] == im->rgb[i + 1] && im->rgb[i] == im->rgb[i + 2];
      lo = std::min<int>(lo, im->rgb[i]);
      hi = std::max<int>(hi, im->rgb[i]);
    }
    EXPECT_EQ(all_gray, c.gray) << c.file;
    EXPECT_GT(hi - lo, 100) << c.file << ": a photograph, not a flat image";
  }
}

// The shared PNGs against an independent decoder (tools/png_rgb_digest.py: zlib and the PNG
// filters in Python): a position-weighted sum of every RGB byte and the corner pixels.
TEST(DecodeTest, SharedPngsMatchAnIndependentDecoder) {
  struct Case {
    const char* file;
    uint64_t weighted_sum;
    std::vector<int> first_two, last;
  };
  for (const Case& c :
       {Case{"chelsea.png", 1490020006029ULL, {143, 120, 104, 143, 120, 104}, {162, 138, 128}},
        Case{"camera.png", 3303325655145ULL, {200, 200, 200, 200, 200, 200}, {149, 149, 149}},
        Case{"gravel.png", 3265398963374ULL, {171, 171, 171, 159, 159, 159}, {158, 158, 158}}}) {
    QBC_REQUIRE_SHARED(path, std::string("data/images/") + c.file);
    const StatusOr<Image> im = decode_file(path.string());
    QBC_ASSERT_OK(im);
    uint64_t sum = 0;
    for (size_t i = 0; i < im->rgb.size(); ++i) sum += uint64_t{im->rgb[i]} * (i % 65521 + 1);
    EXPECT_EQ(sum, c.weighted_sum) << c.file;
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(im->rgb[i], c.first_two[i]) << c.file;
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(im->rgb[im->rgb.size() - 3 + i], c.last[i]) << c.file;
  }
}

}  // namespace
}  // namespace qbc::image
