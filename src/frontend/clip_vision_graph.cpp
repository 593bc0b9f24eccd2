// build_clip_vision_graph: LLaVA's CLIP (or SigLIP) vision tower and projector as an MBLT graph
// (qbc/frontend/clip_vision.h has the picture), following HF's CLIPVisionEmbeddings /
// SiglipVisionEmbeddings, the shared encoder layer and LlavaMultiModalProjector. The Conv2d patch
// embedding (kernel = stride = patch; CLIP without bias, SigLIP with) is a linear over the
// flattened (channel, y, x) patch: the checkpoint's [width, 3, p, p] weight read row-major as
// [width, 3·p²].
#include <algorithm>

#include "qbc/frontend/clip_vision.h"
#include "qbc/frontend/gemma3_vision.h"
#include "qbc/frontend/position_interpolation.h"
#include "qbc/image/preprocess.h"
#include "qbc/ir/builder.h"
#include "vit_layers.h"

namespace qbc::frontend {
namespace {

using ir::DType;
using ir::TensorType;
using ir::ValueId;

constexpr int64_t kChannels = 3;
const std::string kTower = "vision_tower.vision_model.";
const std::string kProjector = "multi_modal_projector.";

TensorType f32(std::vector<int64_t> dims) { return TensorType{DType::kF32, std::move(dims)}; }

class ClipBuilder {
 public:
  ClipBuilder(const VisionConfig& vc, int64_t layers, ir::Graph& g)
      : vc_(vc), layers_(layers), b_(g), vit_(vc, kTower, b_) {}

  StatusOr<ValueId> build() {
    const bool clip = vc_.tower == VisionTower::kClip;
    const int64_t rows = llava_tower_rows(vc_);
    const int64_t patch = kChannels * vc_.patch_size * vc_.patch_size;
    QBC_ASSIGN_OR_RETURN(ValueId x, b_.input("patches", f32({1, rows, patch})));
    QBC_ASSIGN_OR_RETURN(ValueId base, b_.input("embed_base", f32({1, rows, vc_.width})));
    QBC_ASSIGN_OR_RETURN(x, vit_.linear("vis.patch_embed", x, kTower + "embeddings.patch_embedding",
                                        vc_.width, patch, /*bias=*/!clip));
    QBC_ASSIGN_OR_RETURN(x, b_.add("vis.embed", x, base, kTower + "embeddings"));
    if (clip) {
      QBC_ASSIGN_OR_RETURN(x, vit_.norm("vis.pre_norm", x, kTower + "pre_layrnorm"));
    }
    QBC_ASSIGN_OR_RETURN(x, vit_.layers(x, layers_));
    b_.set_part(ir::Part::kHead);
    const int64_t t = vc_.text_hidden;
    QBC_ASSIGN_OR_RETURN(
        x, vit_.linear("vis.proj.fc1", x, kProjector + "linear_1", t, vc_.width, true));
    QBC_ASSIGN_OR_RETURN(x, b_.gelu("vis.proj.gelu", x, kProjector + "act"));
    return vit_.linear("image_features", x, kProjector + "linear_2", t, t, true);
  }

 private:
  const VisionConfig& vc_;
  int64_t layers_;
  ir::Builder b_;
  VitLayers vit_;
};

}  // namespace

StatusOr<int64_t> clip_used_layers(const VisionConfig& vc) {
  const int64_t n = vc.feature_layer < 0 ? vc.depth + 1 + vc.feature_layer : vc.feature_layer;
  if (n < 0 || n > vc.depth) {
    return invalid_argument(vc.model_type, ": vision_feature_layer ", vc.feature_layer,
                            " is outside a ", vc.depth, "-layer tower");
  }
  return n;
}

std::vector<float> clip_patch_rows(const std::vector<float>& chw, int64_t side, int64_t patch) {
  return image::patch_rows(chw, side, patch, 1);
}

StatusOr<std::vector<float>> clip_embed_base(const VisionConfig& vc, const TensorFloats& read) {
  std::vector<float> base, cls;
  if (vc.tower == VisionTower::kSiglip) {  // the position table alone, resampled like CLIP's
    const std::string name = kTower + "embeddings.position_embedding.weight";
    QBC_RETURN_IF_ERROR(read(name, &base));
    const int64_t table = vc.position_grid, w = vc.width, side = vc.image_size / vc.patch_size;
    if (static_cast<int64_t>(base.size()) != table * table * w)
      return invalid_argument("tensor '", name, "' has ", base.size(), " values; a ", table, " x ",
                              table, " grid of width ", w, " needs ", table * table * w);
    if (side == table) return base;
    return bicubic_position_rows(base, table, w, side, side);
  }
  QBC_RETURN_IF_ERROR(read(kTower + "embeddings.position_embedding.weight", &base));
  QBC_RETURN_IF_ERROR(read(kTower + "embeddings.class_embedding", &cls));
  const int64_t table = vc.position_grid, w = vc.width;
  const auto want = static_cast<size_t>((1 + table * table) * w);
  if (base.size() != want || cls.size() != static_cast<size_t>(w)) {
    return invalid_argument(kTower, "embeddings: position_embedding has ", base.size(),
                            " values and class_embedding ", cls.size(), "; a ", table, " x ", table,
                            " grid needs ", want, " and ", w);
  }
  // Another image size: the patch rows resampled (CLIPVisionEmbeddings.interpolate_pos_encoding),
  // the class row kept.
  const int64_t side = vc.image_size / vc.patch_size;
  if (side != table) {
    QBC_ASSIGN_OR_RETURN(std::vector<float> rows,
                         bicubic_position_rows(std::vector<float>(base.begin() + w, base.end()),
                                               table, w, side, side));
    base.resize(static_cast<size_t>(w));
    base.insert(base.end(), rows.begin(), rows.end());
  }
  for (size_t i = 0; i < cls.size(); ++i) base[i] += cls[i];
  return base;
}

std::vector<float> clip_drop_cls(const VisionConfig& vc, const std::vector<float>& rows,
                                 int64_t c) {
  if (vc.keeps_cls) return rows;
  return std::vector<float>(rows.begin() + std::min<int64_t>(c, rows.size()), rows.end());
}

StatusOr<ir::Graph> build_clip_vision_graph(const VisionConfig& vc) {
  if (!builds_clip_vision_graph(vc)) {
    return unimplemented("CLIP vision graph of a ", vision_tower_name(vc.tower), " tower (",
                         vc.model_type, "): only LLaVA's CLIP and SigLIP towers are built here");
  }
  if (vc.hidden_act != "quick_gelu" && vc.hidden_act != "gelu" &&
      vc.hidden_act != "gelu_pytorch_tanh" && vc.hidden_act != "gelu_new") {
    return unimplemented(vc.model_type, " vision_config.hidden_act '", vc.hidden_act,
                         "' (quick_gelu, gelu, gelu_pytorch_tanh and gelu_new are built)");
  }
  if (vc.projector_act != "gelu") {
    return unimplemented(vc.model_type, " projector_hidden_act '", vc.projector_act,
                         "' (gelu is built)");
  }
  if (vc.heads <= 0 || vc.width % vc.heads != 0 || vc.text_hidden <= 0 || vc.ffn <= 0) {
    return invalid_argument(vc.model_type, " vision_config: hidden_size ", vc.width,
                            ", num_attention_heads ", vc.heads, ", intermediate_size ", vc.ffn,
                            ", text hidden_size ", vc.text_hidden);
  }
  QBC_ASSIGN_OR_RETURN(const int64_t layers, clip_used_layers(vc));
  ir::Graph g(vc.tower == VisionTower::kClip ? "llava_clip_vision" : "llava_siglip_vision");
  ClipBuilder cb(vc, layers, g);
  QBC_ASSIGN_OR_RETURN(ValueId out, cb.build());
  g.add_output(out);
  return g;
}

}  // namespace qbc::frontend
