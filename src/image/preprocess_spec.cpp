// preprocessor_config.json -> PreprocessSpec (qbc/image/preprocess.h). The defaults are those
// of the HF processor classes' __init__ when a key is absent or null.
#include <nlohmann/json.hpp>

#include "qbc/image/preprocess.h"
#include "qbc/support/file_util.h"
#include "qbc/support/json_parse.h"

namespace qbc::image {
namespace {

using nlohmann::json;

// OPENAI_CLIP_MEAN / OPENAI_CLIP_STD and IMAGENET_STANDARD_MEAN / STD of
// transformers.image_utils.
constexpr std::array<double, 3> kClipMean = {0.48145466, 0.4578275, 0.40821073};
constexpr std::array<double, 3> kClipStd = {0.26862954, 0.26130258, 0.27577711};
constexpr std::array<double, 3> kHalf = {0.5, 0.5, 0.5};

class Reader {
 public:
  Reader(const json& j, std::string_view name) : j_(j), name_(name) {}

  const json* find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  Status bad(const std::string& key, const char* what) const {
    return invalid_argument(name_, ": key '", key, "': ", what);
  }
  Status get_bool(const char* key, bool* out) const {
    const json* v = find(key);
    if (v == nullptr) return ok_status();
    if (!v->is_boolean()) return bad(key, "expected true or false");
    *out = v->get<bool>();
    return ok_status();
  }
  Status get_int(const json& obj, const std::string& key, int64_t* out) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return ok_status();
    if (!it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > (1LL << 40))
      return bad(key, "expected a positive integer");
    *out = it->get<int64_t>();
    return ok_status();
  }
  Status get_int(const char* key, int64_t* out) const { return get_int(j_, key, out); }
  Status get_int32(const char* key, int32_t* out) const {
    int64_t v = *out;
    QBC_RETURN_IF_ERROR(get_int(key, &v));
    if (v > 65536) return bad(key, "larger than 65536");
    *out = static_cast<int32_t>(v);
    return ok_status();
  }
  Status get_triple(const char* key, std::array<double, 3>* out, bool positive) const {
    const json* v = find(key);
    if (v == nullptr) return ok_status();
    if (v->is_number()) {
      out->fill(v->get<double>());
    } else if (v->is_array() && v->size() == 3) {
      for (size_t c = 0; c < 3; ++c) {
        if (!(*v)[c].is_number()) return bad(key, "expected three numbers (R, G, B)");
        (*out)[c] = (*v)[c].get<double>();
      }
    } else {
      return bad(key, "expected three numbers (R, G, B)");
    }
    for (double x : *out)
      if (positive && !(x > 0)) return bad(key, "expected positive numbers");
    return ok_status();
  }
  /// size / crop_size {height, width} into h, w (both or neither).
  Status get_hw(const char* key, int32_t* h, int32_t* w) const {
    const json* v = find(key);
    if (v == nullptr) return ok_status();
    if (!v->is_object()) return bad(key, "expected an object");
    int64_t hh = 0, ww = 0;
    QBC_RETURN_IF_ERROR(get_int(*v, "height", &hh));
    QBC_RETURN_IF_ERROR(get_int(*v, "width", &ww));
    if (hh == 0 || ww == 0 || hh > 65536 || ww > 65536)
      return bad(key, "expected {\"height\": H, \"width\": W} of at most 65536");
    *h = static_cast<int32_t>(hh);
    *w = static_cast<int32_t>(ww);
    return ok_status();
  }

 private:
  const json& j_;
  std::string_view name_;
};

Status read_common(const Reader& r, PreprocessSpec* s, int64_t default_resample) {
  int64_t resample = default_resample;
  QBC_RETURN_IF_ERROR(r.get_int("resample", &resample));
  if (resample != 1 && resample != 2 && resample != 3) {
    return unimplemented("key 'resample': PIL filter ", resample,
                         " is not implemented (1 Lanczos, 2 bilinear and 3 bicubic are)");
  }
  s->filter = static_cast<Filter>(resample);
  bool resize = true;
  QBC_RETURN_IF_ERROR(r.get_bool("do_resize", &resize));
  if (!resize) return unimplemented("key 'do_resize': false is not implemented");
  QBC_RETURN_IF_ERROR(r.get_bool("do_rescale", &s->rescale));
  QBC_RETURN_IF_ERROR(r.get_bool("do_normalize", &s->normalize));
  if (const json* f = r.find("rescale_factor")) {
    if (!f->is_number() || !(f->get<double>() > 0))
      return r.bad("rescale_factor", "expected a positive number");
    s->rescale_factor = f->get<double>();
  }
  QBC_RETURN_IF_ERROR(r.get_triple("image_mean", &s->mean, false));
  QBC_RETURN_IF_ERROR(r.get_triple("image_std", &s->std, true));
  bool pan_and_scan = false;
  QBC_RETURN_IF_ERROR(r.get_bool("do_pan_and_scan", &pan_and_scan));
  if (pan_and_scan)
    return unimplemented("key 'do_pan_and_scan': Pan&Scan crops are not implemented");
  return ok_status();
}

Status read_qwen(const Reader& r, PreprocessSpec* s) {
  s->rule = ResizeRule::kSmart;
  s->mean = kClipMean;
  s->std = kClipStd;
  s->patch_size = 14;
  s->temporal_patch_size = 2;
  s->merge_size = 2;
  s->min_pixels = 56 * 56;
  s->max_pixels = 28 * 28 * 1280;
  QBC_RETURN_IF_ERROR(read_common(r, s, 3));
  QBC_RETURN_IF_ERROR(r.get_int32("patch_size", &s->patch_size));
  QBC_RETURN_IF_ERROR(r.get_int32("temporal_patch_size", &s->temporal_patch_size));
  QBC_RETURN_IF_ERROR(r.get_int32("merge_size", &s->merge_size));
  if (const json* size = r.find("size")) {  // {shortest_edge: min_pixels, longest_edge: max_pixels}
    if (!size->is_object()) return r.bad("size", "expected an object");
    QBC_RETURN_IF_ERROR(r.get_int(*size, "shortest_edge", &s->min_pixels));
    QBC_RETURN_IF_ERROR(r.get_int(*size, "longest_edge", &s->max_pixels));
  }
  QBC_RETURN_IF_ERROR(r.get_int("min_pixels", &s->min_pixels));  // the older keys win, as in HF
  QBC_RETURN_IF_ERROR(r.get_int("max_pixels", &s->max_pixels));
  if (s->min_pixels > s->max_pixels) return r.bad("min_pixels", "larger than max_pixels");
  return ok_status();
}

Status read_clip(const Reader& r, PreprocessSpec* s) {
  s->mean = kClipMean;
  s->std = kClipStd;
  QBC_RETURN_IF_ERROR(read_common(r, s, 3));
  s->rule = ResizeRule::kShortestEdge;
  s->shortest_edge = 224;
  s->center_crop = true;
  s->crop_height = s->crop_width = 224;
  if (const json* size = r.find("size")) {
    if (size->is_object() && size->contains("height")) {
      s->rule = ResizeRule::kFixed;
      QBC_RETURN_IF_ERROR(r.get_hw("size", &s->height, &s->width));
    } else {
      if (!size->is_object()) return r.bad("size", "expected an object");
      int64_t e = s->shortest_edge;
      QBC_RETURN_IF_ERROR(r.get_int(*size, "shortest_edge", &e));
      if (e > 65536) return r.bad("size", "shortest_edge larger than 65536");
      s->shortest_edge = static_cast<int32_t>(e);
    }
  }
  QBC_RETURN_IF_ERROR(r.get_bool("do_center_crop", &s->center_crop));
  QBC_RETURN_IF_ERROR(r.get_hw("crop_size", &s->crop_height, &s->crop_width));
  return ok_status();
}

Status read_fixed(const Reader& r, PreprocessSpec* s, int64_t default_resample, int32_t side) {
  s->mean = kHalf;
  s->std = kHalf;
  s->rule = ResizeRule::kFixed;
  s->height = s->width = side;
  QBC_RETURN_IF_ERROR(read_common(r, s, default_resample));
  return r.get_hw("size", &s->height, &s->width);
}

// Idefics3ImageProcessor / SmolVLMImageProcessor: defaults of its __init__ (size.longest_edge
// 4 x 364, max_image_size.longest_edge 364, Lanczos, mean = std = 0.5, splitting on).
Status read_tiles(const Reader& r, PreprocessSpec* s) {
  s->mean = kHalf;
  s->std = kHalf;
  s->rule = ResizeRule::kTiles;
  s->longest_edge = 4 * 364;
  s->tile = 364;
  QBC_RETURN_IF_ERROR(read_common(r, s, 1));
  QBC_RETURN_IF_ERROR(r.get_bool("do_image_splitting", &s->split));
  for (const auto& [key, dst] :
       {std::pair{"size", &s->longest_edge}, std::pair{"max_image_size", &s->tile}}) {
    const json* v = r.find(key);
    if (v == nullptr) continue;
    const json* e = v->is_object() && v->contains("longest_edge") ? &(*v)["longest_edge"] : nullptr;
    if (e == nullptr || !e->is_number_integer() || e->get<int64_t>() < 1 ||
        e->get<int64_t>() > 65536)
      return r.bad(key, "expected {\"longest_edge\": N} with N in 1..65536");
    *dst = static_cast<int32_t>(e->get<int64_t>());
  }
  return ok_status();
}

}  // namespace

StatusOr<PreprocessSpec> parse_preprocess_spec(std::string_view json_text, std::string_view name) {
  QBC_ASSIGN_OR_RETURN(const json j, parse_json_text(json_text, name));
  if (!j.is_object()) return invalid_argument(name, ": expected a JSON object");
  const Reader r(j, name);
  PreprocessSpec s;
  const json* type = r.find("image_processor_type");
  if (type == nullptr || !type->is_string())
    return invalid_argument(name, ": key 'image_processor_type': missing (expected a string)");
  s.processor = type->get<std::string>();
  Status st;
  if (s.processor == "Qwen2VLImageProcessor" || s.processor == "Qwen2VLImageProcessorFast") {
    st = read_qwen(r, &s);
  } else if (s.processor == "CLIPImageProcessor" || s.processor == "CLIPImageProcessorFast") {
    st = read_clip(r, &s);
  } else if (s.processor == "Gemma3ImageProcessor" || s.processor == "Gemma3ImageProcessorFast") {
    st = read_fixed(r, &s, 2, 224);
  } else if (s.processor == "SiglipImageProcessor" || s.processor == "SiglipImageProcessorFast") {
    st = read_fixed(r, &s, 3, 224);
  } else if (s.processor == "Idefics3ImageProcessor" || s.processor == "SmolVLMImageProcessor") {
    st = read_tiles(r, &s);
  } else {
    return unimplemented(name, ": key 'image_processor_type': '", s.processor,
                         "' is not implemented (Qwen2VLImageProcessor, CLIPImageProcessor, "
                         "Gemma3ImageProcessor, SiglipImageProcessor, Idefics3ImageProcessor and "
                         "SmolVLMImageProcessor are)");
  }
  if (!st.ok() && st.code() == Code::kUnimplemented)
    return Status(st.code(), std::string(name) + ": " + st.message());
  if (!st.ok()) return st;
  return s;
}

StatusOr<PreprocessSpec> load_preprocess_spec(const std::string& path) {
  QBC_ASSIGN_OR_RETURN(const std::string text, read_text_file(path));
  return parse_preprocess_spec(text, path);
}

}  // namespace qbc::image
