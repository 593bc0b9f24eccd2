// VisionEncoder (qbc/runtime/vision_encoder.h).
#include "qbc/runtime/vision_encoder.h"

#include <cstring>
#include <utility>

#include "qbc/isa/verify.h"

namespace qbc::runtime {

StatusOr<std::unique_ptr<VisionEncoder>> VisionEncoder::create(const mxq::LoadedModel& file,
                                                               isa::Scheme scheme,
                                                               int host_threads) {
  const std::string name = file.files.empty() ? "the model" : file.files[0];
  if (file.vision == nullptr || !file.meta.has_vision())
    return invalid_argument(name,
                            " has no vision part: it takes no images (compile the VLM "
                            "folder to get one)");
  std::unique_ptr<VisionEncoder> e(new VisionEncoder());
  e->part_ = file.meta.vision();
  const mxq::HostAsset* pre = file.asset(e->part_.preprocessor_asset());
  if (pre == nullptr)
    return invalid_argument(name, ": no asset '", e->part_.preprocessor_asset(), "'");
  QBC_ASSIGN_OR_RETURN(e->spec_,
                       image::parse_preprocess_spec(pre->bytes, name + ": asset " + pre->name));
  if (e->spec_.flattens_patches())
    return unimplemented(name, ": the vision part's ", e->spec_.processor,
                         " preprocessing (flattened patch rows) does not run here yet");
  const mxq::LoadedModel& v = *file.vision;
  const std::shared_ptr<const isa::Bundle> bundle = v.bundle;
  const mxq::HostAsset* base = v.asset(mxq::kVisionEmbedBaseAsset);
  const int64_t rows = bundle->chunk;
  int64_t base_width = 0;
  for (const isa::FeatureInput& in : bundle->feature_inputs) {
    if (in.name == "embed_base") {
      base_width = in.width;
    } else if (in.name != "patches") {
      return unimplemented(name, ": the vision part takes an input '", in.name,
                           "' this runtime does not make (it makes 'patches' and 'embed_base')");
    }
  }
  if (base == nullptr || base_width <= 0 ||
      base->bytes.size() != static_cast<size_t>(rows * base_width) * sizeof(float))
    return invalid_argument(name, ": the vision part's embed_base asset is missing or not [", rows,
                            ", ", base_width, "] fp32");
  e->embed_base_.resize(base->bytes.size() / sizeof(float));
  std::memcpy(e->embed_base_.data(), base->bytes.data(), base->bytes.size());
  DeviceOptions d;
  d.scheme = bundle->modes[0].scheme;
  for (const isa::Mode& m : bundle->modes)
    if (m.scheme == scheme) d.scheme = scheme;
  d.host_threads = host_threads;
  d.verify = [](const isa::Bundle& b) { return isa::verify(b); };
  auto session = FeatureSession::create(bundle, d);
  if (!session.ok()) return session.status().with_context(name + ": the vision part");
  e->session_ = std::move(*session);
  return e;
}

StatusOr<std::vector<float>> VisionEncoder::encode(const image::Image& img, std::string_view name) {
  QBC_ASSIGN_OR_RETURN(const image::Pixels px, image::preprocess(img, spec_, name));
  const int64_t side = part_.image_size();
  if (px.size.height != side || px.size.width != side)
    return invalid_argument(name, ": preprocessing gives ", px.size.width, "x", px.size.height,
                            ", the compiled vision part takes ", side, "x", side);
  const int64_t grid = side / part_.patch_size();
  const int64_t leading = part_.feature_rows() - grid * grid;
  if (leading < 0)
    return invalid_argument(name, ": ", grid * grid, " patches for ", part_.feature_rows(),
                            " feature rows");
  // The tower's inputs by name, in the bundle's order (create() checked the names).
  std::vector<std::vector<float>> inputs;
  for (const isa::FeatureInput& in : session_->device().bundle().feature_inputs) {
    if (in.name == "patches")
      inputs.push_back(image::patch_rows(px.values, side, part_.patch_size(), leading));
    else
      inputs.push_back(embed_base_);
  }
  std::vector<float> rows;
  QBC_RETURN_IF_ERROR(session_->forward(inputs, &rows));
  const size_t drop = static_cast<size_t>(part_.drop_front_rows() * part_.feature_width());
  return std::vector<float>(rows.begin() + static_cast<std::ptrdiff_t>(drop), rows.end());
}

StatusOr<std::vector<float>> VisionEncoder::encode_file(const std::string& path) {
  QBC_ASSIGN_OR_RETURN(const image::Image img, image::decode_file(path));
  return encode(img, path);
}

}  // namespace qbc::runtime
