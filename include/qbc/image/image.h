// Decoded images (docs/multimodal.md, "Image decoding"): PNG through libpng and JPEG through
// libjpeg-turbo, always to 8-bit RGB, height x width x 3, row-major. Part of qbc_image, which
// depends on qbc_support only so that the runtime can link it.
//
// What the decoders do with the inputs that are not 8-bit RGB:
//   - grayscale (PNG 1/2/4/8/16-bit, JPEG) is expanded to R = G = B;
//   - a PNG palette is expanded to its colours; transparency (an alpha channel or tRNS) is
//     dropped, not composited onto a background;
//   - 16-bit PNG samples keep their high byte (what Pillow does for 16-bit RGB PNG);
//   - CMYK and YCCK JPEGs are refused (kInvalidArgument, exit 2) naming the colour space.
// Sizes are checked against DecodeLimits from the header, before any pixel buffer is allocated.
// Every failure (empty, truncated, corrupt, unknown format, too large) is a Status naming the
// file and what is wrong; the libraries' error jumps never leave the decoder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "qbc/support/status.h"

namespace qbc::image {

/// An 8-bit RGB image: rgb[(y * width + x) * 3 + c].
struct Image {
  int32_t width = 0;
  int32_t height = 0;
  std::vector<uint8_t> rgb;

  uint8_t at(int32_t y, int32_t x, int c) const {
    return rgb[(static_cast<size_t>(y) * static_cast<size_t>(width) + static_cast<size_t>(x)) * 3 +
               static_cast<size_t>(c)];
  }
};

/// What a decoder accepts. The defaults bound one decoded image to 192 MiB of RGB.
struct DecodeLimits {
  int64_t max_side = 16384;                ///< pixels per side
  int64_t max_pixels = int64_t{64} << 20;  ///< width * height (64 Mpixel)
  int64_t max_file_bytes = int64_t{256} << 20;
};

/// The file formats the decoders know, from the file's first bytes (not its name).
enum class Format { kUnknown, kPng, kJpeg };
Format sniff(const uint8_t* data, size_t size);

/// Decodes the PNG or JPEG file at `path`.
StatusOr<Image> decode_file(const std::string& path, const DecodeLimits& limits = {});

/// Decodes a PNG or JPEG held in memory; `name` starts every error message.
StatusOr<Image> decode_bytes(const uint8_t* data, size_t size, std::string_view name,
                             const DecodeLimits& limits = {});

/// kInvalidArgument naming `name` when width x height breaks `limits` (or is zero).
Status check_dimensions(std::string_view name, int64_t width, int64_t height,
                        const DecodeLimits& limits);

}  // namespace qbc::image
