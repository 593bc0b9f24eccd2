// Small writers of PNG and JPEG test inputs, independent of qbc's readers.
//   PNG: written from the specification (ISO/IEC 15948 / W3C PNG): the 8-byte signature, then
//        chunks of big-endian length, type, data and the CRC-32 of type + data (zlib's crc32,
//        the CRC the spec defines); IDAT holds a zlib stream of the scanlines, each prefixed by
//        filter type 0 (None). Non-interlaced.
//   JPEG: written by libjpeg's compressor (the published encoder).
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>
// clang-format off
#include <jpeglib.h>
// clang-format on

namespace qbc::testing::img {

inline std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

inline std::string png_chunk(const std::string& type, const std::string& data) {
  const std::string body = type + data;
  const uLong crc =
      crc32(0L, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()));
  return be32(static_cast<uint32_t>(data.size())) + body + be32(static_cast<uint32_t>(crc));
}

inline std::string png_ihdr(uint32_t width, uint32_t height, int bit_depth, int color_type,
                            int interlace = 0) {
  std::string d = be32(width) + be32(height);
  d += static_cast<char>(bit_depth);
  d += static_cast<char>(color_type);
  d += std::string(2, '\0');  // compression 0, filter 0
  d += static_cast<char>(interlace);
  return png_chunk("IHDR", d);
}

inline std::string zlib_compress(const std::string& raw) {
  uLongf n = compressBound(static_cast<uLong>(raw.size()));
  std::string out(n, '\0');
  compress2(reinterpret_cast<Bytef*>(out.data()), &n, reinterpret_cast<const Bytef*>(raw.data()),
            static_cast<uLong>(raw.size()), 9);
  out.resize(n);
  return out;
}

/// A whole PNG: `rows` are the raw scanline bytes (no filter byte); `extra` chunks (PLTE,
/// tRNS, ...) go between IHDR and IDAT.
inline std::string png_file(uint32_t width, uint32_t height, int bit_depth, int color_type,
                            const std::vector<std::string>& rows, const std::string& extra = "") {
  std::string raw;
  for (const std::string& r : rows) raw += '\0' + r;
  return "\x89PNG\r\n\x1a\n" + png_ihdr(width, height, bit_depth, color_type) + extra +
         png_chunk("IDAT", zlib_compress(raw)) + png_chunk("IEND", "");
}

/// A JPEG of `components` samples per pixel in `space` (JCS_RGB, JCS_GRAYSCALE, JCS_CMYK).
inline std::string jpeg_file(int width, int height, int components, J_COLOR_SPACE space,
                             const std::vector<uint8_t>& pixels, int quality = 100) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = static_cast<JDIMENSION>(width);
  c.image_height = static_cast<JDIMENSION>(height);
  c.input_components = components;
  c.in_color_space = space;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  jpeg_start_compress(&c, TRUE);
  for (int y = 0; y < height; ++y) {
    JSAMPROW row = const_cast<uint8_t*>(&pixels[static_cast<size_t>(y * width * components)]);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  std::string out(reinterpret_cast<char*>(buf), size);
  jpeg_destroy_compress(&c);
  std::free(buf);
  return out;
}

}  // namespace qbc::testing::img
