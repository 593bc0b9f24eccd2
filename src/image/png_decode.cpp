// PNG through libpng (qbc/image/image.h). libpng reports errors by longjmp; each libpng call
// runs inside one of the small C-style steps below, whose frames hold no C++ objects with
// destructors, so a jump never skips a destructor. The pixel buffer is owned by the caller.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "decoders.h"

namespace qbc::image::internal {
namespace {

struct PngInput {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  bool truncated = false;
  char message[256] = {};
};

void on_error(png_structp png, png_const_charp msg) {
  auto* in = static_cast<PngInput*>(png_get_error_ptr(png));
  std::snprintf(in->message, sizeof(in->message), "%s", msg);
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}  // ancillary-chunk problems: chunk dropped

void on_read(png_structp png, png_bytep out, size_t length) {
  auto* in = static_cast<PngInput*>(png_get_io_ptr(png));
  if (length > in->size - in->pos) {
    in->truncated = true;
    png_error(png, "the file ends early (truncated)");
  }
  std::memcpy(out, in->data + in->pos, length);
  in->pos += length;
}

struct Header {
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0, interlace = 0;
};

// Step 1: the signature and the chunks up to the first IDAT. Nothing is sized by the image yet.
int read_header(png_structp png, png_infop info, Header* h) {
  if (setjmp(png_jmpbuf(png))) return 1;
  png_read_info(png, info);
  png_get_IHDR(png, info, &h->width, &h->height, &h->bit_depth, &h->color_type, &h->interlace,
               nullptr, nullptr);
  return 0;
}

// Step 2: the transforms to 8-bit RGB, then the rows (into the caller's buffer) and the end.
int read_pixels(png_structp png, png_infop info, const Header& h, png_bytepp rows,
                size_t* rowbytes) {
  if (setjmp(png_jmpbuf(png))) return 1;
  if (h.color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (h.color_type == PNG_COLOR_TYPE_GRAY && h.bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (h.bit_depth == 16) png_set_strip_16(png);
  if ((h.color_type & PNG_COLOR_MASK_COLOR) == 0) png_set_gray_to_rgb(png);
  // An alpha channel, or the one the palette expansion makes of a tRNS chunk, is dropped.
  if ((h.color_type & PNG_COLOR_MASK_ALPHA) != 0 || png_get_valid(png, info, PNG_INFO_tRNS) != 0)
    png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  *rowbytes = png_get_rowbytes(png, info);
  if (*rowbytes != static_cast<size_t>(h.width) * 3) return 2;
  png_read_image(png, rows);
  png_read_end(png, nullptr);
  return 0;
}

}  // namespace

StatusOr<Image> decode_png(const uint8_t* data, size_t size, std::string_view name,
                           const DecodeLimits& limits) {
  PngInput in;
  in.data = data;
  in.size = size;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &in, on_error, on_warning);
  if (png == nullptr) return internal_error(name, ": libpng could not start");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return internal_error(name, ": libpng could not start");
  }
  struct Guard {
    png_structp* png;
    png_infop* info;
    ~Guard() { png_destroy_read_struct(png, info, nullptr); }
  } guard{&png, &info};
  png_set_read_fn(png, &in, on_read);
  // Our own limits decide (below, with a message naming them), not libpng's defaults.
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);

  Header h;
  auto failure = [&](const char* what) -> Status {
    if (in.truncated) return data_loss(name, ": PNG ", what, ": the file ends early (truncated)");
    return data_loss(name, ": not a valid PNG (", what, "): ", in.message);
  };
  if (read_header(png, info, &h) != 0) return failure("header");
  QBC_RETURN_IF_ERROR(check_dimensions(name, h.width, h.height, limits));

  Image img;
  img.width = static_cast<int32_t>(h.width);
  img.height = static_cast<int32_t>(h.height);
  img.rgb.resize(static_cast<size_t>(h.width) * h.height * 3);
  std::vector<png_bytep> rows(h.height);
  for (size_t y = 0; y < rows.size(); ++y) rows[y] = img.rgb.data() + y * h.width * 3;
  size_t rowbytes = 0;
  const int r = read_pixels(png, info, h, rows.data(), &rowbytes);
  if (r == 2) {
    return internal_error(name, ": libpng gives rows of ", rowbytes, " bytes for ", h.width,
                          " RGB pixels (colour type ", h.color_type, ", ", h.bit_depth, " bit)");
  }
  if (r != 0) return failure("pixel data");
  return img;
}

}  // namespace qbc::image::internal
