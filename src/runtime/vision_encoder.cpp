// VisionEncoder (qbc/runtime/vision_encoder.h).
#include "qbc/runtime/vision_encoder.h"

#include <algorithm>
#include <cstring>
#include <string>
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
  const mxq::LoadedModel& v = *file.vision;
  const std::shared_ptr<const isa::Bundle> bundle = v.bundle;
  const int64_t rows = bundle->chunk;
  const int64_t merge = mxq::vision_merge(e->part_);
  // image::PreprocessSpec: the compiled square (Idefics3: of tiles_per_side tiles per side).
  e->spec_.compiled_size =
      static_cast<int32_t>(e->part_.image_size() * std::max<int64_t>(1, e->part_.tiles_per_side()));
  if ((e->spec_.rule == image::ResizeRule::kTiles) != (e->part_.tiles_per_side() > 0) ||
      (e->spec_.rule == image::ResizeRule::kTiles && e->spec_.tile != e->part_.image_size()))
    return invalid_argument(name, ": the vision part takes ", e->part_.tiles_per_side(),
                            " tiles per side of ", e->part_.image_size(),
                            " pixels; its preprocessing asset (", e->spec_.processor, ") ",
                            e->spec_.rule == image::ResizeRule::kTiles
                                ? "cuts tiles of " + std::to_string(e->spec_.tile)
                                : std::string("cuts no tiles"));
  if (e->spec_.rule == image::ResizeRule::kTiles && !e->spec_.split &&
      e->part_.tiles_per_side() > 1)
    return invalid_argument(
        name, ": the vision part takes ", e->part_.tiles_per_side(),
        " tiles per side; its preprocessing asset turns do_image_splitting off");
  // Patch rows the host orders in merge groups (Qwen2-VL's at the compiled size, Idefics3's
  // pixel-shuffle groups of one tile): the whole grid, in whole groups.
  if (e->spec_.flattens_patches() || e->spec_.rule == image::ResizeRule::kTiles) {
    const int64_t grid = e->part_.image_size() / e->part_.patch_size();
    if (grid * grid != rows || grid % merge != 0)
      return invalid_argument(name, ": the vision part takes ", rows, " patch rows, not the ", grid,
                              " x ", grid, " of a ", e->part_.image_size(), " pixel image merged ",
                              merge, " x ", merge);
  }
  // The tower's constant inputs (every input but the patches) come from the vision part's
  // assets, in the bundle's input order.
  for (const isa::FeatureInput& in : bundle->feature_inputs) {
    if (in.name == "patches") {
      // Patch rows cut by the host (image::patch_rows): 3·p² values each, the grid's rows after
      // at most one leading row (CLIP's CLS slot). Checked before any image is cut.
      const int64_t p = e->part_.patch_size(), grid = e->part_.image_size() / p;
      if (!e->spec_.flattens_patches() &&
          (in.width != 3 * p * p || rows - grid * grid < 0 || rows - grid * grid > 1))
        return invalid_argument(name, ": the vision part's patches input is [", rows, ", ",
                                in.width, "], not the [", grid * grid, " (+1), ", 3 * p * p,
                                "] of a ", e->part_.image_size(), " pixel image in patches of ", p);
      e->inputs_.emplace_back();
      continue;
    }
    const std::string asset = mxq::vision_input_asset(in.name);
    const mxq::HostAsset* a = v.asset(asset);
    if (a == nullptr || a->bytes.size() != static_cast<size_t>(rows * in.width) * sizeof(float))
      return invalid_argument(name, ": the vision part's input '", in.name, "' needs asset '",
                              asset, "' of [", rows, ", ", in.width, "] fp32; ",
                              a == nullptr
                                  ? "it is missing"
                                  : "it holds " + std::to_string(a->bytes.size()) + " bytes");
    std::vector<float> values(a->bytes.size() / sizeof(float));
    std::memcpy(values.data(), a->bytes.data(), a->bytes.size());
    e->inputs_.push_back(std::move(values));
  }
  // A tower in window order: a permutation of the merge groups.
  if (const mxq::HostAsset* w = v.asset(mxq::kVisionWindowOrderAsset)) {
    const int64_t groups = rows / (merge * merge);
    std::vector<int64_t> order(w->bytes.size() / sizeof(int64_t));
    std::memcpy(order.data(), w->bytes.data(), order.size() * sizeof(int64_t));
    std::vector<bool> seen(static_cast<size_t>(groups), false);
    bool ok = w->bytes.size() == static_cast<size_t>(groups) * sizeof(int64_t) &&
              bundle->output_rows == groups;
    for (int64_t g : order) {
      ok = ok && g >= 0 && g < groups && !seen[static_cast<size_t>(g)];
      if (ok) seen[static_cast<size_t>(g)] = true;
    }
    if (!ok)
      return invalid_argument(name, ": asset '", mxq::kVisionWindowOrderAsset,
                              "' is not a permutation of the ", groups, " merge groups of the ",
                              bundle->output_rows, " feature rows");
    e->window_order_ = std::move(order);
  }
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
  QBC_ASSIGN_OR_RETURN(const std::vector<image::Pixels> views,
                       image::preprocess_views(img, spec_, name));
  if (static_cast<int64_t>(views.size()) != mxq::vision_views(part_))
    return invalid_argument(name, ": preprocessing gives ", views.size(),
                            " views, the compiled vision part takes ", mxq::vision_views(part_));
  std::vector<float> out;
  for (const image::Pixels& px : views) {
    QBC_ASSIGN_OR_RETURN(std::vector<float> rows, encode_view(px, name));
    out.insert(out.end(), rows.begin(), rows.end());
  }
  return out;
}

StatusOr<std::vector<float>> VisionEncoder::encode_view(const image::Pixels& px,
                                                        std::string_view name) {
  const int64_t side = part_.image_size();
  if (px.size.height != side || px.size.width != side)
    return invalid_argument(name, ": preprocessing gives ", px.size.width, "x", px.size.height,
                            ", the compiled vision part takes ", side, "x", side);
  const isa::Bundle& b = session_->device().bundle();
  const int64_t merge = mxq::vision_merge(part_);
  const int64_t group = merge * merge;
  // The tower's inputs by name, in the bundle's order (create() checked them).
  for (size_t i = 0; i < b.feature_inputs.size(); ++i) {
    if (b.feature_inputs[i].name != "patches") continue;
    const int64_t width = b.feature_inputs[i].width;
    if (spec_.flattens_patches()) {  // HF's pixel_values, merge groups in window order
      if (static_cast<int64_t>(px.values.size()) != b.chunk * width)
        return invalid_argument(name, ": ", px.values.size(), " pixel values, the vision part ",
                                "takes ", b.chunk, " patch rows of ", width);
      inputs_[i] =
          window_order_.empty() ? px.values : permute_groups(px.values, group * width, false);
    } else {
      const int64_t grid = side / part_.patch_size();
      const int64_t leading = b.chunk - grid * grid;
      if (leading < 0)
        return invalid_argument(name, ": ", grid * grid, " patches for ", b.chunk,
                                " rows of the vision part");
      inputs_[i] = image::patch_rows(px.values, side, part_.patch_size(), leading);
      // Idefics3's pixel shuffle: each token's merge x merge patches consecutively.
      if (spec_.rule == image::ResizeRule::kTiles)
        inputs_[i] = image::shuffle_group_rows(inputs_[i], width, grid, merge);
    }
  }
  std::vector<float> rows;
  QBC_RETURN_IF_ERROR(session_->forward(inputs_, &rows));
  const int64_t w = row_width();
  if (!window_order_.empty()) rows = permute_groups(rows, w, true);
  const size_t drop = static_cast<size_t>(part_.drop_front_rows() * w);
  std::vector<float> out(rows.begin() + static_cast<std::ptrdiff_t>(drop), rows.end());
  // The language graph scales its inputs_embeds; HF scales only token embeddings (the
  // feature row; DeepStack rows are added to the residual stream as they are).
  if (const float d = static_cast<float>(part_.feature_divisor()); d != 0.0f && d != 1.0f) {
    for (size_t r = 0; r < out.size(); r += static_cast<size_t>(w))
      for (int64_t i = 0; i < part_.feature_width(); ++i) out[r + static_cast<size_t>(i)] /= d;
  }
  return out;
}

std::vector<int32_t> VisionEncoder::image_span() const {
  if (part_.image_span_ids_size() > 0)
    return std::vector<int32_t>(part_.image_span_ids().begin(), part_.image_span_ids().end());
  std::vector<int32_t> ids(part_.image_prefix_ids().begin(), part_.image_prefix_ids().end());
  ids.insert(ids.end(), static_cast<size_t>(part_.tokens_per_image()), part_.image_token_id());
  ids.insert(ids.end(), part_.image_suffix_ids().begin(), part_.image_suffix_ids().end());
  return ids;
}

std::vector<float> VisionEncoder::permute_groups(const std::vector<float>& v, int64_t unit,
                                                 bool back) const {
  std::vector<float> out(v.size());
  const auto u = static_cast<size_t>(unit);
  for (size_t k = 0; k < window_order_.size(); ++k) {
    const size_t hf = static_cast<size_t>(window_order_[k]);
    const size_t from = back ? k : hf, to = back ? hf : k;
    std::copy(v.begin() + static_cast<std::ptrdiff_t>(from * u),
              v.begin() + static_cast<std::ptrdiff_t>((from + 1) * u),
              out.begin() + static_cast<std::ptrdiff_t>(to * u));
  }
  return out;
}

StatusOr<std::vector<float>> VisionEncoder::encode_file(const std::string& path) {
  QBC_ASSIGN_OR_RETURN(const image::Image img, image::decode_file(path));
  return encode(img, path);
}

}  // namespace qbc::runtime
