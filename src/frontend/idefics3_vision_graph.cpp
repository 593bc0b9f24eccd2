// build_idefics3_vision_graph: the Idefics3 / SmolVLM SigLIP tower and pixel-shuffle connector
// (qbc/frontend/idefics3_vision.h has the picture), following HF's Idefics3VisionEmbeddings,
// Idefics3EncoderLayer, post_layernorm and Idefics3Connector. The Conv2d patch embedding (kernel =
// stride = patch, with bias) is a linear over the flattened (channel, y, x) patch.
#include <algorithm>

#include "qbc/frontend/gemma3_vision.h"
#include "qbc/frontend/idefics3_vision.h"
#include "qbc/image/preprocess.h"
#include "qbc/ir/builder.h"
#include "vit_layers.h"

namespace qbc::frontend {
namespace {

using ir::DType;
using ir::TensorType;
using ir::ValueId;

constexpr int64_t kChannels = 3;

TensorType f32(std::vector<int64_t> dims) { return TensorType{DType::kF32, std::move(dims)}; }

class Idefics3Builder {
 public:
  Idefics3Builder(const VisionConfig& vc, const Idefics3VisionNames& names, ir::Graph& g)
      : vc_(vc), n_(names), b_(g), vit_(vc, names.tower, b_) {}

  StatusOr<ValueId> build() {
    const int64_t side = vc_.tower_size() / vc_.patch_size, rows = side * side;
    const int64_t patch = kChannels * vc_.patch_size * vc_.patch_size;
    const int64_t unit = vc_.merge * vc_.merge;
    QBC_ASSIGN_OR_RETURN(ValueId x, b_.input("patches", f32({1, rows, patch})));
    QBC_ASSIGN_OR_RETURN(ValueId base, b_.input("embed_base", f32({1, rows, vc_.width})));
    QBC_ASSIGN_OR_RETURN(
        x, vit_.linear("vis.patch_embed", x, n_.tower + "embeddings.patch_embedding", vc_.width,
                       patch, true));
    QBC_ASSIGN_OR_RETURN(x, b_.add("vis.embed", x, base, n_.tower + "embeddings"));
    QBC_ASSIGN_OR_RETURN(x, vit_.layers(x, vc_.depth));
    QBC_ASSIGN_OR_RETURN(x, vit_.norm("vis.post_norm", x, n_.tower + "post_layernorm"));
    const std::string c = n_.connector;
    QBC_ASSIGN_OR_RETURN(x, b_.merge_rows("vis.connector.shuffle", x, unit, c + "pixel_shuffle"));
    // The head is the projection, whose fp32 output the language model takes.
    b_.set_part(ir::Part::kHead);
    const std::string proj = c + "modality_projection.proj";
    b_.weight("image_features.weight", f32({vc_.text_hidden, unit * vc_.width}), proj + ".weight");
    return b_.linear("image_features", x, "image_features.weight", "", proj);
  }

 private:
  const VisionConfig& vc_;
  const Idefics3VisionNames& n_;
  ir::Builder b_;
  VitLayers vit_;
};

/// HF's Idefics3VisionEmbeddings position ids of a whole tile of n x n patches, one axis:
/// bucketize(arange(0, 1 - 1e-6, 1 / n), arange(1 / n, 1.0, 1 / n), right=True), the aranges in
/// float32 (each value start + i·step computed wider, then rounded). qbc gives the tower the
/// table's rows in plain order (idefics3_embed_base), which is right when these ids are
/// 0..n-1; that is checked with the step as a float32 and as a float64 value.
bool hf_positions_are_in_order(int64_t n) {
  for (const bool f32_step : {true, false}) {
    const double step = f32_step
                            ? static_cast<double>(static_cast<float>(1.0 / static_cast<double>(n)))
                            : 1.0 / static_cast<double>(n);
    const double b_step = 1.0 / static_cast<double>(n);
    std::vector<float> bounds;
    for (int64_t j = 0; b_step + static_cast<double>(j) * b_step < 1.0; ++j)
      bounds.push_back(static_cast<float>(b_step + static_cast<double>(j) * b_step));
    int64_t count = 0;
    for (int64_t i = 0; static_cast<double>(i) * step < 1.0 - 1e-6; ++i, ++count) {
      const auto x = static_cast<float>(static_cast<double>(i) * step);
      const auto bucket = std::upper_bound(bounds.begin(), bounds.end(), x) - bounds.begin();
      if (bucket != i) return false;
    }
    if (count != n) return false;
  }
  return true;
}

}  // namespace

std::vector<float> idefics3_patch_rows(const std::vector<float>& chw, int64_t side, int64_t patch,
                                       int64_t scale) {
  return image::shuffle_group_rows(siglip_patch_rows(chw, side, patch), kChannels * patch * patch,
                                   side / patch, scale);
}

StatusOr<std::vector<float>> idefics3_embed_base(const VisionConfig& vc, const TensorFloats& read,
                                                 const Idefics3VisionNames& names) {
  const std::string name = names.tower + "embeddings.position_embedding.weight";
  std::vector<float> table;
  QBC_RETURN_IF_ERROR(read(name, &table));
  const int64_t grid = vc.tower_size() / vc.patch_size;
  if (static_cast<int64_t>(table.size()) != grid * grid * vc.width)
    return invalid_argument("tensor '", name, "' has ", table.size(), " values; a ", grid, " x ",
                            grid, " position grid of width ", vc.width, " needs ",
                            grid * grid * vc.width);
  return image::shuffle_group_rows(table, vc.width, grid, vc.merge);
}

StatusOr<ir::Graph> build_idefics3_vision_graph(const VisionConfig& vc,
                                                const Idefics3VisionNames& names) {
  if (!builds_idefics3_vision_graph(vc)) {
    return unimplemented("Idefics3 vision graph of a ", vision_tower_name(vc.tower), " tower with ",
                         vision_projector_name(vc.projector), " (", vc.model_type,
                         "): only the SigLIP tower with the pixel-shuffle connector is built here");
  }
  QBC_RETURN_IF_ERROR(check_vit_tower(vc, vc.merge, "scale_factor"));
  const int64_t grid = vc.tower_size() / vc.patch_size;
  if (!hf_positions_are_in_order(grid))
    return unimplemented(vc.model_type, ": a tile of ", grid, " x ", grid,
                         " patches (vision_config image_size / patch_size), whose position ids HF "
                         "bucketizes out of row-major order; qbc feeds the position table in "
                         "order");
  ir::Graph g("idefics3_siglip_vision");
  Idefics3Builder ib(vc, names, g);
  QBC_ASSIGN_OR_RETURN(ValueId out, ib.build());
  g.add_output(out);
  return g;
}

}  // namespace qbc::frontend
