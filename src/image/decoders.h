// The format decoders behind decode_bytes (qbc/image/image.h), one file each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "qbc/image/image.h"

namespace qbc::image::internal {

StatusOr<Image> decode_png(const uint8_t* data, size_t size, std::string_view name,
                           const DecodeLimits& limits);
StatusOr<Image> decode_jpeg(const uint8_t* data, size_t size, std::string_view name,
                            const DecodeLimits& limits);

}  // namespace qbc::image::internal
