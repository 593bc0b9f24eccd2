// build_gemma3_vision_graph: Gemma 3's SigLIP tower and soft-embedding projector as an MBLT graph
// (qbc/frontend/gemma3_vision.h has the picture), following HF's SiglipVisionEmbeddings,
// SiglipEncoderLayer, post_layernorm and Gemma3MultiModalProjector. The Conv2d patch embedding
// (kernel = stride = patch, with bias) is a linear over the flattened (channel, y, x) patch.
#include "qbc/frontend/gemma3_vision.h"
#include "qbc/ir/builder.h"
#include "vit_layers.h"

namespace qbc::frontend {
namespace {

using ir::DType;
using ir::TensorType;
using ir::ValueId;

constexpr int64_t kChannels = 3;
constexpr const char* kProjection = "mm_input_projection_weight";

TensorType f32(std::vector<int64_t> dims) { return TensorType{DType::kF32, std::move(dims)}; }

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

class SiglipBuilder {
 public:
  SiglipBuilder(const VisionConfig& vc, const Gemma3VisionNames& names, ir::Graph& g)
      : vc_(vc), n_(names), b_(g), vit_(vc, names.tower, b_) {}

  StatusOr<ValueId> build() {
    const int64_t side = vc_.image_size / vc_.patch_size, rows = side * side;
    const int64_t patch = kChannels * vc_.patch_size * vc_.patch_size;
    QBC_ASSIGN_OR_RETURN(ValueId x, b_.input("patches", f32({1, rows, patch})));
    QBC_ASSIGN_OR_RETURN(ValueId base, b_.input("embed_base", f32({1, rows, vc_.width})));
    QBC_ASSIGN_OR_RETURN(
        x, vit_.linear("vis.patch_embed", x, n_.tower + "embeddings.patch_embedding", vc_.width,
                       patch, true));
    QBC_ASSIGN_OR_RETURN(x, b_.add("vis.embed", x, base, n_.tower + "embeddings"));
    QBC_ASSIGN_OR_RETURN(x, vit_.layers(x, vc_.depth));
    QBC_ASSIGN_OR_RETURN(x, vit_.norm("vis.post_norm", x, n_.tower + "post_layernorm"));
    const std::string p = n_.projector;
    // The pool and the norm are body values (fp16 on the vector unit, like the tower's); the
    // head is the projection, whose fp32 output the language model takes.
    QBC_ASSIGN_OR_RETURN(x, b_.avg_pool("vis.proj.pool", x, side, vc_.pool, p + "avg_pool"));
    b_.weight("vis.proj.norm.weight", f32({vc_.width}), p + "mm_soft_emb_norm.weight");
    QBC_ASSIGN_OR_RETURN(x, b_.rms_norm("vis.proj.norm", x, "vis.proj.norm.weight", vc_.norm_eps,
                                        true, 0, p + "mm_soft_emb_norm"));
    b_.set_part(ir::Part::kHead);
    b_.weight("image_features.weight", f32({vc_.text_hidden, vc_.width}), p + kProjection);
    return b_.linear("image_features", x, "image_features.weight", "", p + kProjection);
  }

 private:
  const VisionConfig& vc_;
  const Gemma3VisionNames& n_;
  ir::Builder b_;
  VitLayers vit_;
};

}  // namespace

Gemma3VisionNames gemma3_vision_names(bool transformers_4_52) {
  Gemma3VisionNames n;
  if (transformers_4_52) {
    n.tower = "model." + n.tower;
    n.projector = "model." + n.projector;
  }
  return n;
}

std::vector<float> siglip_patch_rows(const std::vector<float>& chw, int64_t side, int64_t patch) {
  std::vector<float> rows = clip_patch_rows(chw, side, patch);  // row 0: the CLS slot
  rows.erase(rows.begin(), rows.begin() + kChannels * patch * patch);
  return rows;
}

StatusOr<ir::Graph> build_gemma3_vision_graph(const VisionConfig& vc,
                                              const Gemma3VisionNames& names) {
  if (!builds_gemma3_vision_graph(vc)) {
    return unimplemented(
        "Gemma 3 vision graph of a ", vision_tower_name(vc.tower), " tower with ",
        vision_projector_name(vc.projector), " (", vc.model_type,
        "): only gemma3's SigLIP tower and soft-embedding projector are built here");
  }
  QBC_RETURN_IF_ERROR(check_vit_tower(vc, vc.pool, "pool"));
  ir::Graph g("gemma3_siglip_vision");
  SiglipBuilder sb(vc, names, g);
  QBC_ASSIGN_OR_RETURN(ValueId out, sb.build());
  g.add_output(out);
  g.metadata["vision.transposed_weights"] = names.projector + kProjection;
  return g;
}

Status gemma3_read_vision_weight(const TensorFloats& read, const ir::Weight& w,
                                 std::vector<float>* out) {
  QBC_RETURN_IF_ERROR(read(w.tensor, out));
  if (!ends_with(w.tensor, kProjection)) return ok_status();
  const int64_t rows = w.type.dim(0), cols = w.type.dim(1);  // the linear's [out, in]
  if (static_cast<int64_t>(out->size()) != rows * cols) {
    return invalid_argument("tensor '", w.tensor, "' has ", out->size(), " values; weight '",
                            w.name, "' needs ", w.type.to_string());
  }
  std::vector<float> t(out->size());
  for (int64_t i = 0; i < cols; ++i) {  // stored [in = cols, out = rows]
    for (int64_t o = 0; o < rows; ++o) t[o * cols + i] = (*out)[i * rows + o];
  }
  *out = std::move(t);
  return ok_status();
}

}  // namespace qbc::frontend
