// import_vision_graph (qbc/driver/vision_import.h): reads a VLM folder's vision_config, builds
// the tower's graph for one fixed image size and checks every weight against the checkpoint.
#include "qbc/driver/vision_import.h"

#include <filesystem>

#include "qbc/frontend/clip_vision.h"
#include "qbc/frontend/gemma3_vision.h"
#include "qbc/frontend/idefics3_vision.h"
#include "qbc/frontend/qwen_vision.h"
#include "qbc/frontend/safetensors.h"
#include "qbc/frontend/vision_config.h"
#include "qbc/frontend/vision_towers.h"
#include "qbc/ir/verifier.h"
#include "qbc/support/file_util.h"

namespace qbc::driver {
namespace {

namespace fs = std::filesystem;

// Every weight of `g` exists in `ck` with its element count.
Status check_weights(const ir::Graph& g, const frontend::SafetensorsCheckpoint& ck) {
  for (const auto& [name, w] : g.weights()) {
    QBC_ASSIGN_OR_RETURN(const frontend::SafetensorsTensor* t, ck.get(w.tensor));
    if (t->num_elements() != w.type.num_elements()) {
      return invalid_argument(ck.path().string(), ": tensor '", w.tensor, "' has ",
                              t->num_elements(), " elements; the vision graph's weight '", name,
                              "' needs ", w.type.to_string());
    }
  }
  return ok_status();
}

// transformers >= 4.52 saves every tower and projector tensor under `model.` (`model.visual.*`,
// `model.vision_tower.*`, `model.multi_modal_projector.*`): a weight whose HF name the
// checkpoint lacks reads the `model.` one when the checkpoint has that.
void use_checkpoint_names(ir::Graph& g, const frontend::SafetensorsCheckpoint& ck) {
  std::vector<ir::Weight> renamed;
  for (const auto& [name, w] : g.weights()) {
    const std::string name_4_52 = checkpoint_tensor_name(ck, w.tensor);
    if (name_4_52 == w.tensor) continue;
    ir::Weight r = w;
    r.tensor = name_4_52;
    renamed.push_back(std::move(r));
  }
  for (ir::Weight& w : renamed) g.add_weight(std::move(w));
}

// LLaVA's CLIP or SigLIP tower at vc.image_size (its learned positions resampled bicubically to
// another size on the host, as HF's interpolate_pos_encoding).
StatusOr<ir::Graph> clip_graph(const frontend::VisionConfig& vc) {
  QBC_ASSIGN_OR_RETURN(ir::Graph g, frontend::build_clip_vision_graph(vc));
  const int64_t side = vc.image_size / vc.patch_size;
  g.metadata["vision.image_size"] =
      std::to_string(vc.image_size) + "x" + std::to_string(vc.image_size);
  g.metadata["vision.grid_hw"] = std::to_string(side) + "x" + std::to_string(side);
  // Output row 0 is the CLS token's (SigLIP: the first patch's); the strategy "default" drops
  // it on the host.
  g.metadata["vision.drop_cls"] = vc.keeps_cls ? "0" : "1";
  // The host computes the embed_base input from the checkpoint's tables (clip_embed_base).
  const bool clip = vc.tower == frontend::VisionTower::kClip;
  g.metadata["vision.embed_base"] =
      std::string("vision_tower.vision_model.embeddings.position_embedding.weight") +
      (clip ? " + class_embedding on row 0" : "") +
      std::string(vc.image_size / vc.patch_size != vc.position_grid
                      ? "; the patch rows resampled bicubically from the table's " +
                            std::to_string(vc.position_grid) + " x " +
                            std::to_string(vc.position_grid) + " grid"
                      : "");
  return g;
}

// Gemma 3's SigLIP tower and projector: learned positions fix the image size (896 for the real
// config). The checkpoint's names pick the prefix (transformers >= 4.52 adds `model.`).
StatusOr<ir::Graph> gemma3_graph(const frontend::VisionConfig& vc,
                                 const frontend::SafetensorsCheckpoint& ck) {
  const bool new_names = !ck.get("vision_tower.vision_model.post_layernorm.weight").ok() &&
                         ck.get("model.vision_tower.vision_model.post_layernorm.weight").ok();
  const frontend::Gemma3VisionNames names = frontend::gemma3_vision_names(new_names);
  QBC_ASSIGN_OR_RETURN(ir::Graph g, frontend::build_gemma3_vision_graph(vc, names));
  const int64_t side = vc.image_size / vc.patch_size;
  g.metadata["vision.image_size"] =
      std::to_string(vc.image_size) + "x" + std::to_string(vc.image_size);
  g.metadata["vision.grid_hw"] = std::to_string(side) + "x" + std::to_string(side);
  g.metadata["vision.pool"] = std::to_string(vc.pool);
  // The host reads the embed_base input from the checkpoint.
  g.metadata["vision.embed_base"] = names.tower + "embeddings.position_embedding.weight";
  return g;
}

// Idefics3 / SmolVLM: one tile of the tower's side; the image of vc.image_size is its tiles and
// a global view, each a call of this graph (the host cuts them, as Idefics3ImageProcessor does).
StatusOr<ir::Graph> idefics3_graph(const frontend::VisionConfig& vc) {
  QBC_ASSIGN_OR_RETURN(ir::Graph g, frontend::build_idefics3_vision_graph(vc));
  const int64_t tile = vc.tower_size(), side = tile / vc.patch_size;
  g.metadata["vision.image_size"] =
      std::to_string(vc.image_size) + "x" + std::to_string(vc.image_size);
  g.metadata["vision.tile_size"] = std::to_string(tile) + "x" + std::to_string(tile);
  g.metadata["vision.views"] = std::to_string(vc.views());
  g.metadata["vision.grid_hw"] = std::to_string(side) + "x" + std::to_string(side);
  g.metadata["vision.scale_factor"] = std::to_string(vc.merge);
  // The host reads the embed_base input from the checkpoint, in pixel-shuffle group order.
  g.metadata["vision.embed_base"] =
      frontend::Idefics3VisionNames{}.tower + "embeddings.position_embedding.weight";
  return g;
}

// The Qwen2-VL, Qwen2.5-VL or Qwen3-VL tower at vc.image_size.
StatusOr<ir::Graph> qwen_graph(const frontend::VisionConfig& vc) {
  const int64_t side = vc.image_size;
  const frontend::VisionGrid grid{1, side / vc.patch_size, side / vc.patch_size};
  QBC_ASSIGN_OR_RETURN(frontend::QwenVisionLayout layout, frontend::qwen_vision_layout(vc, grid));
  QBC_ASSIGN_OR_RETURN(ir::Graph g, frontend::build_qwen_vision_graph(vc, layout));
  g.metadata["vision.image_size"] = std::to_string(side) + "x" + std::to_string(side);
  g.metadata["vision.grid_thw"] = "1x" + std::to_string(grid.h) + "x" + std::to_string(grid.w);
  if (vc.tower == frontend::VisionTower::kQwen3Vit) {
    // The host computes the embed_base input from the checkpoint (qwen3_position_rows).
    g.metadata["vision.embed_base"] = "visual.pos_embed.weight interpolated bilinearly to the grid";
    std::string layers;
    for (int64_t l : vc.deepstack_layers) layers += (layers.empty() ? "" : ",") + std::to_string(l);
    g.metadata["vision.deepstack_layers"] = layers;
  }
  return g;
}

}  // namespace

StatusOr<std::optional<ir::Graph>> import_vision_graph(const std::string& model,
                                                       int64_t image_size) {
  std::error_code ec;
  const fs::path config = fs::path(model) / "config.json";
  if (!fs::is_directory(model, ec) || !fs::is_regular_file(config, ec))
    return std::optional<ir::Graph>();
  QBC_ASSIGN_OR_RETURN(std::optional<frontend::VisionConfig> vc,
                       frontend::load_vision_config(config));
  if (!vc) return std::optional<ir::Graph>();
  const bool clip = frontend::builds_clip_vision_graph(*vc);
  const bool gemma3 = frontend::builds_gemma3_vision_graph(*vc);
  const bool idefics3 = frontend::builds_idefics3_vision_graph(*vc);
  QBC_RETURN_IF_ERROR(frontend::check_vision_tower_built(*vc, config.string()));
  QBC_ASSIGN_OR_RETURN(frontend::SafetensorsCheckpoint ck,
                       frontend::SafetensorsCheckpoint::open(model));
  // One size rule for every tower (frontend::set_image_size: a Qwen tower multiples of patch x
  // merge, CLIP multiples of patch, Gemma 3's SigLIP its own size).
  QBC_RETURN_IF_ERROR(frontend::set_image_size(*vc, image_size, "vision.imageSize"));
  StatusOr<ir::Graph> built = gemma3     ? gemma3_graph(*vc, ck)
                              : idefics3 ? idefics3_graph(*vc)
                              : clip     ? clip_graph(*vc)
                                         : qwen_graph(*vc);
  if (!built.ok()) return built.status();
  ir::Graph g = std::move(*built);
  use_checkpoint_names(g, ck);
  QBC_RETURN_IF_ERROR(check_weights(g, ck));
  g.source_path = fs::weakly_canonical(fs::absolute(model)).string();
  for (const frontend::SafetensorsFile& f : ck.shards()) {
    const auto size = fs::file_size(f.path(), ec);
    g.files.push_back(ir::SourceFile{fs::weakly_canonical(f.path()).string(), ec ? 0 : size, ""});
  }
  QBC_ASSIGN_OR_RETURN(g.metadata["config.json"], read_text_file(config.string()));
  QBC_RETURN_IF_ERROR(ir::verify(g));
  return std::optional<ir::Graph>(std::move(g));
}

std::string checkpoint_tensor_name(const frontend::SafetensorsCheckpoint& ck,
                                   const std::string& hf) {
  if (ck.get(hf).ok() || !ck.get("model." + hf).ok()) return hf;
  return "model." + hf;
}

std::string vision_mblt_path(const std::string& mblt_path) {
  const std::string ext = ".mblt";
  if (mblt_path.size() >= ext.size() &&
      mblt_path.compare(mblt_path.size() - ext.size(), ext.size(), ext) == 0)
    return mblt_path.substr(0, mblt_path.size() - ext.size()) + ".vision.mblt";
  return mblt_path + ".vision.mblt";
}

}  // namespace qbc::driver
