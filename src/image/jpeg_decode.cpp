// JPEG through libjpeg-turbo (qbc/image/image.h). libjpeg's error_exit would exit the process;
// ours formats the message and longjmps back into one of the small C-style steps below, whose
// frames hold no C++ objects with destructors. A libjpeg warning (premature end of file, corrupt
// entropy data, ...) is an error too: the pixels it would give are not the file's.
#include <cstdio>  // jpeglib.h needs FILE and size_t first
// clang-format off
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <csetjmp>
#include <cstring>
#include <string>

#include "decoders.h"

namespace qbc::image::internal {
namespace {

// The decoder's working memory (progressive JPEGs keep every coefficient): past this libjpeg
// stops with an error instead of allocating.
constexpr long kMaxDecoderMemory = 1L << 30;

struct ErrorManager {
  jpeg_error_mgr pub;  // first: libjpeg sees a jpeg_error_mgr*
  jmp_buf jump;
  int message_code = 0;
  char message[JMSG_LENGTH_MAX] = {};
};

[[noreturn]] void on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  err->message_code = err->pub.msg_code;
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void on_message(j_common_ptr cinfo, int level) {
  if (level < 0) on_error(cinfo);  // a warning: corrupt or truncated data
}

int read_header(jpeg_decompress_struct* cinfo, ErrorManager* err, const uint8_t* data,
                size_t size) {
  if (setjmp(err->jump)) return 1;
  jpeg_create_decompress(cinfo);
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(cinfo, TRUE);
  return 0;
}

int read_pixels(jpeg_decompress_struct* cinfo, ErrorManager* err, uint8_t* out) {
  if (setjmp(err->jump)) return 1;
  cinfo->out_color_space = JCS_RGB;
  cinfo->mem->max_memory_to_use = kMaxDecoderMemory;
  jpeg_start_decompress(cinfo);
  if (cinfo->output_components != 3 || cinfo->output_width != cinfo->image_width ||
      cinfo->output_height != cinfo->image_height)
    return 2;
  const size_t stride = static_cast<size_t>(cinfo->output_width) * 3;
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = out + static_cast<size_t>(cinfo->output_scanline) * stride;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  return 0;
}

const char* color_space_name(J_COLOR_SPACE c) {
  switch (c) {
    case JCS_CMYK:
      return "CMYK";
    case JCS_YCCK:
      return "YCCK (Adobe CMYK)";
    default:
      return "an unknown colour space";
  }
}

}  // namespace

StatusOr<Image> decode_jpeg(const uint8_t* data, size_t size, std::string_view name,
                            const DecodeLimits& limits) {
  jpeg_decompress_struct cinfo;
  std::memset(&cinfo, 0, sizeof(cinfo));
  ErrorManager err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error;
  err.pub.emit_message = on_message;
  struct Guard {
    jpeg_decompress_struct* c;
    ~Guard() { jpeg_destroy_decompress(c); }
  } guard{&cinfo};

  auto failure = [&](const char* what) -> Status {
    if (err.message_code == JWRN_JPEG_EOF || err.message_code == JERR_INPUT_EOF)
      return data_loss(name, ": JPEG ", what, ": the file ends early (truncated)");
    if (err.message_code == JERR_NO_BACKING_STORE) {
      return invalid_argument(name, ": decoding this JPEG would take more than ",
                              kMaxDecoderMemory >> 20, " MiB of decoder memory");
    }
    return data_loss(name, ": not a valid JPEG (", what, "): ", err.message);
  };
  if (read_header(&cinfo, &err, data, size) != 0) return failure("header");
  const J_COLOR_SPACE cs = cinfo.jpeg_color_space;
  if (cs != JCS_GRAYSCALE && cs != JCS_RGB && cs != JCS_YCbCr) {
    return invalid_argument(name, ": the JPEG is in ", color_space_name(cs), " (",
                            cinfo.num_components,
                            " components); only grayscale and RGB/YCbCr JPEGs are read: convert "
                            "it to RGB first");
  }
  QBC_RETURN_IF_ERROR(check_dimensions(name, cinfo.image_width, cinfo.image_height, limits));

  Image img;
  img.width = static_cast<int32_t>(cinfo.image_width);
  img.height = static_cast<int32_t>(cinfo.image_height);
  img.rgb.resize(static_cast<size_t>(img.width) * static_cast<size_t>(img.height) * 3);
  const int r = read_pixels(&cinfo, &err, img.rgb.data());
  if (r == 2) {
    return internal_error(name, ": libjpeg gives ", cinfo.output_width, " x ", cinfo.output_height,
                          " x ", cinfo.output_components, " for a ", img.width, " x ", img.height,
                          " RGB image");
  }
  if (r != 0) return failure("pixel data");
  return img;
}

}  // namespace qbc::image::internal
