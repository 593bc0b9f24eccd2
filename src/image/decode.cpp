// Format sniffing, the file reader and the dimension limits (qbc/image/image.h).
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "decoders.h"
#include "qbc/image/image.h"

namespace qbc::image {

Format sniff(const uint8_t* data, size_t size) {
  static constexpr uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (size >= sizeof(kPng) && std::memcmp(data, kPng, sizeof(kPng)) == 0) return Format::kPng;
  if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) return Format::kJpeg;
  return Format::kUnknown;
}

Status check_dimensions(std::string_view name, int64_t width, int64_t height,
                        const DecodeLimits& limits) {
  if (width <= 0 || height <= 0) {
    return invalid_argument(name, ": the image is ", width, " x ", height,
                            " pixels (a side of zero)");
  }
  if (width > limits.max_side || height > limits.max_side) {
    return invalid_argument(name, ": the image is ", width, " x ", height,
                            " pixels, larger than the limit of ", limits.max_side,
                            " pixels per side (docs/multimodal.md, \"Limits\")");
  }
  if (width * height > limits.max_pixels) {
    return invalid_argument(name, ": the image is ", width, " x ", height, " = ", width * height,
                            " pixels, more than the limit of ", limits.max_pixels,
                            " (docs/multimodal.md, \"Limits\")");
  }
  return ok_status();
}

StatusOr<Image> decode_bytes(const uint8_t* data, size_t size, std::string_view name,
                             const DecodeLimits& limits) {
  if (size == 0) return invalid_argument(name, ": the file is empty (0 bytes), not an image");
  switch (sniff(data, size)) {
    case Format::kPng:
      return internal::decode_png(data, size, name, limits);
    case Format::kJpeg:
      return internal::decode_jpeg(data, size, name, limits);
    case Format::kUnknown:
      break;
  }
  return invalid_argument(name,
                          ": not a PNG or JPEG file (its first bytes are neither the PNG "
                          "signature nor a JPEG start-of-image marker)");
}

StatusOr<Image> decode_file(const std::string& path, const DecodeLimits& limits) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return not_found(path, ": cannot read the image: ", ec.message());
  if (static_cast<int64_t>(size) > limits.max_file_bytes) {
    return invalid_argument(path, ": the file has ", size, " bytes, more than the limit of ",
                            limits.max_file_bytes, " for an image");
  }
  std::string bytes(size, '\0');
  std::ifstream in(path, std::ios::binary);
  if (!in.read(bytes.data(), static_cast<std::streamsize>(size)))
    return not_found(path, ": cannot read the image");
  return decode_bytes(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path, limits);
}

}  // namespace qbc::image
