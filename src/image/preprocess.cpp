// Resize, crop, rescale, normalize and patch order (qbc/image/preprocess.h). The arithmetic
// follows transformers' image_processing_qwen2_vl.py, image_processing_clip.py,
// image_processing_gemma3.py, image_processing_idefics3.py and image_transforms.py (rescale,
// normalize, center_crop).
#include "qbc/image/preprocess.h"

#include <algorithm>
#include <cmath>

namespace qbc::image {
namespace {

// Python's round() of a float: to nearest, ties to even (the default FP rounding mode).
int64_t py_round(double x) { return static_cast<int64_t>(std::nearbyint(x)); }

// CLIP's get_resize_output_image_size(default_to_square=False): the short side becomes `edge`,
// the long side int(edge * long / short).
Size shortest_edge_size(int32_t height, int32_t width, int32_t edge) {
  const bool portrait = width <= height;
  const double s = portrait ? width : height, l = portrait ? height : width;
  const auto long_side = static_cast<int32_t>(static_cast<double>(edge) * l / s);
  return portrait ? Size{long_side, edge} : Size{edge, long_side};
}

void flatten_patches(const Image& img, const PreprocessSpec& spec, Pixels* out) {
  const int32_t ps = spec.patch_size, ms = spec.merge_size, tp = spec.temporal_patch_size;
  out->grid_t = 1;
  out->grid_h = img.height / ps;
  out->grid_w = img.width / ps;
  const int64_t rows = static_cast<int64_t>(out->grid_h) * out->grid_w;
  const int64_t cols = int64_t{3} * tp * ps * ps;
  out->shape = {rows, cols};
  out->values.resize(static_cast<size_t>(rows * cols));
  float lut[3][256];
  for (int c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v) lut[c][v] = normalize_sample(spec, c, static_cast<uint8_t>(v));
  const int32_t blocks_h = out->grid_h / ms, blocks_w = out->grid_w / ms;
  float* dst = out->values.data();
  // Row order (bh, bw, mh, mw); column order (c, t, y, x): HF's
  // reshape(t, tp, C, gh/ms, ms, ps, gw/ms, ms, ps).transpose(0, 3, 6, 4, 7, 2, 1, 5, 8).
  for (int32_t bh = 0; bh < blocks_h; ++bh)
    for (int32_t bw = 0; bw < blocks_w; ++bw)
      for (int32_t mh = 0; mh < ms; ++mh)
        for (int32_t mw = 0; mw < ms; ++mw) {
          const int32_t y0 = (bh * ms + mh) * ps, x0 = (bw * ms + mw) * ps;
          for (int c = 0; c < 3; ++c)
            for (int32_t t = 0; t < tp; ++t)  // the image repeated to tp frames
              for (int32_t y = 0; y < ps; ++y)
                for (int32_t x = 0; x < ps; ++x) *dst++ = lut[c][img.at(y0 + y, x0 + x, c)];
        }
}

void to_chw(const Image& img, const PreprocessSpec& spec, Pixels* out) {
  const size_t plane = static_cast<size_t>(img.height) * static_cast<size_t>(img.width);
  out->shape = {3, img.height, img.width};
  out->values.resize(3 * plane);
  for (int c = 0; c < 3; ++c)
    for (size_t i = 0; i < plane; ++i)
      out->values[static_cast<size_t>(c) * plane + i] =
          normalize_sample(spec, c, img.rgb[i * 3 + static_cast<size_t>(c)]);
}

}  // namespace

StatusOr<Size> smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                            int64_t max_pixels) {
  if (height <= 0 || width <= 0 || factor <= 0)
    return invalid_argument("smart_resize: a size of zero");
  const double ratio =
      static_cast<double>(std::max(height, width)) / static_cast<double>(std::min(height, width));
  if (ratio > 200) {
    return invalid_argument("the image is ", width, " x ", height,
                            " pixels: its aspect ratio is over 200 (Qwen2-VL's limit)");
  }
  const auto f = static_cast<double>(factor);
  int64_t h = py_round(static_cast<double>(height) / f) * factor;
  int64_t w = py_round(static_cast<double>(width) / f) * factor;
  const auto area = static_cast<double>(height * width);
  if (h * w > max_pixels) {
    const double beta = std::sqrt(area / static_cast<double>(max_pixels));
    h = std::max(factor, static_cast<int64_t>(std::floor(height / beta / f)) * factor);
    w = std::max(factor, static_cast<int64_t>(std::floor(width / beta / f)) * factor);
  } else if (h * w < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / area);
    h = static_cast<int64_t>(std::ceil(height * beta / f)) * factor;
    w = static_cast<int64_t>(std::ceil(width * beta / f)) * factor;
  }
  QBC_RETURN_IF_ERROR(check_dimensions("smart_resize", w, h, DecodeLimits{}));
  return Size{static_cast<int32_t>(h), static_cast<int32_t>(w)};
}

namespace {

/// `in` with compiled_size applied to its sizes (PreprocessSpec::compiled_size).
PreprocessSpec at_compiled_size(const PreprocessSpec& in) {
  PreprocessSpec s = in;
  const int32_t c = in.compiled_size;
  if (c <= 0) return s;
  if (s.rule == ResizeRule::kFixed) {
    s.height = s.width = c;
  } else if (s.rule == ResizeRule::kShortestEdge && s.center_crop && s.crop_height > 0 &&
             (s.crop_height != c || s.crop_width != c)) {
    // The resize keeps its ratio to the crop (CLIP: 336 then 336 becomes 224 then 224).
    s.shortest_edge = static_cast<int32_t>(
        std::lround(static_cast<double>(s.shortest_edge) * c / static_cast<double>(s.crop_height)));
    s.crop_height = s.crop_width = c;
  }
  return s;
}

}  // namespace

StatusOr<Size> resized_size(const PreprocessSpec& in, int32_t height, int32_t width) {
  const PreprocessSpec spec = at_compiled_size(in);
  switch (spec.rule) {
    case ResizeRule::kSmart:
      if (spec.compiled_size > 0) {
        const int64_t factor = int64_t{spec.patch_size} * spec.merge_size;
        if (factor < 1 || spec.compiled_size % factor != 0)
          return invalid_argument("resize: the compiled size ", spec.compiled_size,
                                  " is not a multiple of patch_size x merge_size ", factor);
        return Size{spec.compiled_size, spec.compiled_size};
      }
      return smart_resize(height, width, int64_t{spec.patch_size} * spec.merge_size,
                          spec.min_pixels, spec.max_pixels);
    case ResizeRule::kShortestEdge: {
      const Size s = shortest_edge_size(height, width, spec.shortest_edge);
      QBC_RETURN_IF_ERROR(check_dimensions("resize", s.width, s.height, DecodeLimits{}));
      return s;
    }
    case ResizeRule::kFixed:
      return Size{spec.height, spec.width};
    case ResizeRule::kTiles: {
      const int32_t side = tiled_side(spec);
      if (side < 1) return invalid_argument("resize: no tile size (max_image_size.longest_edge)");
      return Size{side, side};
    }
  }
  return invalid_argument("resize: unknown rule");
}

float normalize_sample(const PreprocessSpec& spec, int c, uint8_t v) {
  // transformers' rescale: float64 multiply, stored as float32; normalize: float32 throughout.
  float x = spec.rescale ? static_cast<float>(static_cast<double>(v) * spec.rescale_factor)
                         : static_cast<float>(v);
  if (spec.normalize) {
    const auto mean = static_cast<float>(spec.mean[static_cast<size_t>(c)]);
    const auto std = static_cast<float>(spec.std[static_cast<size_t>(c)]);
    x = (x - mean) / std;
  }
  return x;
}

StatusOr<Image> resize_for_model(const Image& img, const PreprocessSpec& in,
                                 std::string_view name) {
  const PreprocessSpec spec = at_compiled_size(in);
  StatusOr<Size> size = resized_size(spec, img.height, img.width);
  if (!size.ok()) return size.status().with_context(name);
  Image out = resize(img, size->width, size->height, spec.filter);
  if (spec.rule == ResizeRule::kShortestEdge && spec.center_crop) {
    const int32_t top = (out.height - spec.crop_height) / 2;
    const int32_t left = (out.width - spec.crop_width) / 2;
    if (out.height < spec.crop_height || out.width < spec.crop_width) {
      return unimplemented(name, ": the resized image (", out.width, " x ", out.height,
                           ") is smaller than the crop (", spec.crop_width, " x ", spec.crop_height,
                           "); padding the crop is not implemented");
    }
    out = crop(out, top, left, spec.crop_height, spec.crop_width);
  }
  return out;
}

int32_t tiled_side(const PreprocessSpec& spec) {
  if (spec.rule != ResizeRule::kTiles || spec.tile < 1) return 0;
  if (spec.compiled_size > 0) return spec.compiled_size;
  const int32_t edge = std::max(spec.longest_edge, spec.tile);
  return (edge + spec.tile - 1) / spec.tile * spec.tile;
}

StatusOr<std::vector<Pixels>> preprocess_views(const Image& img, const PreprocessSpec& spec,
                                               std::string_view name) {
  std::vector<Pixels> out;
  if (spec.rule != ResizeRule::kTiles) {
    QBC_ASSIGN_OR_RETURN(Pixels px, preprocess(img, spec, name));
    out.push_back(std::move(px));
    return out;
  }
  const int32_t side = tiled_side(spec), tile = spec.tile;
  if (side < 1 || side % tile != 0)
    return invalid_argument(name, ": tiles of ", tile, " pixels do not cut a ", side,
                            " pixel square");
  if (Status st = check_dimensions("resize", side, side, DecodeLimits{}); !st.ok())
    return st.with_context(name);
  const Image sized = resize(img, side, side, spec.filter);
  const auto view = [&](const Image& v) {
    Pixels px;
    px.size = {v.height, v.width};
    to_chw(v, spec, &px);
    return px;
  };
  if (side > tile && spec.split) {
    for (int32_t r = 0; r < side / tile; ++r)
      for (int32_t c = 0; c < side / tile; ++c)
        out.push_back(view(crop(sized, r * tile, c * tile, tile, tile)));
  }
  out.push_back(view(resize(sized, tile, tile, spec.filter)));
  return out;
}

StatusOr<Pixels> preprocess(const Image& img, const PreprocessSpec& spec, std::string_view name) {
  if (spec.rule == ResizeRule::kTiles) {  // the last view alone: no tiles cut
    PreprocessSpec global = spec;
    global.split = false;
    QBC_ASSIGN_OR_RETURN(std::vector<Pixels> views, preprocess_views(img, global, name));
    return std::move(views.back());
  }
  QBC_ASSIGN_OR_RETURN(const Image sized, resize_for_model(img, spec, name));
  Pixels out;
  out.size = {sized.height, sized.width};
  if (spec.flattens_patches()) {
    flatten_patches(sized, spec, &out);
  } else {
    to_chw(sized, spec, &out);
  }
  return out;
}

std::vector<float> patch_rows(const std::vector<float>& chw, int64_t side, int64_t patch,
                              int64_t leading) {
  constexpr int64_t kChannels = 3;
  const int64_t grid = side / patch, width = kChannels * patch * patch;
  std::vector<float> rows(static_cast<size_t>((leading + grid * grid) * width), 0.0f);
  for (int64_t gy = 0; gy < grid; ++gy) {
    for (int64_t gx = 0; gx < grid; ++gx) {
      float* row = rows.data() + (leading + gy * grid + gx) * width;
      for (int64_t c = 0; c < kChannels; ++c) {
        for (int64_t y = 0; y < patch; ++y) {
          const float* src = chw.data() + (c * side + gy * patch + y) * side + gx * patch;
          std::copy(src, src + patch, row + (c * patch + y) * patch);
        }
      }
    }
  }
  return rows;
}

std::vector<float> shuffle_group_rows(const std::vector<float>& rows, int64_t width, int64_t grid,
                                      int64_t scale) {
  std::vector<float> out(rows.size());
  auto to = out.begin();
  const int64_t tokens = grid / scale;
  for (int64_t ty = 0; ty < tokens; ++ty)
    for (int64_t tx = 0; tx < tokens; ++tx)
      for (int64_t dy = 0; dy < scale; ++dy)
        for (int64_t dx = 0; dx < scale; ++dx) {
          const auto from =
              rows.begin() +
              static_cast<std::ptrdiff_t>(((ty * scale + dy) * grid + tx * scale + dx) * width);
          to = std::copy(from, from + static_cast<std::ptrdiff_t>(width), to);
        }
  return out;
}

}  // namespace qbc::image
