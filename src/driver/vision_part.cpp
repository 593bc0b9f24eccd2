// build_vision_part (qbc/driver/vision_part.h): a VLM folder's vision tower compiled into a
// feature bundle the language model's file carries.
#include "qbc/driver/vision_part.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <utility>

#include "qbc/driver/vision_import.h"
#include "qbc/frontend/clip_vision.h"
#include "qbc/frontend/gemma3_vision.h"
#include "qbc/frontend/idefics3_vision.h"
#include "qbc/frontend/qwen_vision.h"
#include "qbc/frontend/safetensors.h"
#include "qbc/frontend/vision_config.h"
#include "qbc/frontend/vision_towers.h"
#include "qbc/image/image.h"
#include "qbc/image/preprocess.h"
#include "qbc/isa/verify.h"
#include "qbc/quant/vision_quant.h"
#include "qbc/ref/session.h"
#include "qbc/support/file_util.h"
#include "qbc/support/logging.h"

namespace qbc::driver {
namespace {

namespace fs = std::filesystem;

/// A smooth synthetic photograph-like image (gradients, a few soft discs, mild noise): what
/// calibrates the tower when the user gives no images.
image::Image synthetic_image(uint32_t seed, int32_t width, int32_t height) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  image::Image img;
  img.width = width;
  img.height = height;
  img.rgb.resize(static_cast<size_t>(width) * static_cast<size_t>(height) * 3);
  double base[3], gx[3], gy[3];
  for (int c = 0; c < 3; ++c) {
    base[c] = 40 + 150 * u(gen);
    gx[c] = 80 * (u(gen) - 0.5);
    gy[c] = 80 * (u(gen) - 0.5);
  }
  struct Disc {
    double x, y, r, color[3];
  };
  std::vector<Disc> discs(4);
  for (Disc& d : discs) {
    d.x = u(gen) * width;
    d.y = u(gen) * height;
    d.r = (0.1 + 0.25 * u(gen)) * std::min(width, height);
    for (double& c : d.color) c = 255 * u(gen);
  }
  std::normal_distribution<double> noise(0.0, 6.0);
  for (int32_t y = 0; y < height; ++y) {
    for (int32_t x = 0; x < width; ++x) {
      for (int c = 0; c < 3; ++c) {
        double v = base[c] + gx[c] * x / width + gy[c] * y / height;
        for (const Disc& d : discs) {
          const double dist = std::hypot(x - d.x, y - d.y) / d.r;
          if (dist < 1) v += (d.color[c] - v) * (1 - dist * dist);
        }
        v += noise(gen);
        img.rgb[(static_cast<size_t>(y) * static_cast<size_t>(width) + static_cast<size_t>(x)) * 3 +
                static_cast<size_t>(c)] =
            static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L));
      }
    }
  }
  return img;
}

/// `read` with the output linears of `g` (each graph output: a linear of the language model's
/// width) rotated into spinR1's basis: the weight [out, in] becomes Rᵀ·W (each input column
/// times R as a row) and the bias Rᵀ·b, so the output row y becomes y·R. kUnimplemented for an
/// output that is not a linear (the rotation would need a node of its own).
StatusOr<ir::WeightReader> rotated_output_reader(const ir::Graph& g, const ir::WeightReader& read,
                                                 const quant::OutputBasis& rotation) {
  std::set<std::string> weights, biases;
  for (ir::ValueId out : g.outputs()) {
    const ir::Node& n = g.node(out);
    if (n.op != ir::Op::kLinear)
      return unimplemented(g.name(), ": output '", n.name, "' is a ", ir::describe(n),
                           ", not a linear: it cannot write the language model's rotated basis "
                           "(spinR1); compile without it (equivalentTransformation.spinR1.apply "
                           "false)");
    for (size_t i = 1; i < n.operands.size(); ++i)
      if (n.operands[i].is_weight()) (i == 1 ? weights : biases).insert(n.operands[i].weight);
  }
  return ir::WeightReader([read, weights, biases, rotation](const ir::Weight& w,
                                                            std::vector<float>* out) -> Status {
    QBC_RETURN_IF_ERROR(read(w, out));
    const int64_t h = rotation.hidden;
    if (biases.count(w.name) != 0) {
      if (static_cast<int64_t>(out->size()) != h)
        return internal_error("bias '", w.name, "' has ", out->size(), " values, not ", h);
      return quant::apply_spin_r1(rotation, out->data(), 1);
    }
    if (weights.count(w.name) == 0) return ok_status();
    const auto n = static_cast<int64_t>(out->size());
    if (n % h != 0 || w.type.rank() != 2 || w.type.dim(0) != h)
      return internal_error("weight '", w.name, "' is ", w.type.to_string(), ", not [", h, ", in]");
    const int64_t in = n / h;
    std::vector<float> cols(out->size());  // Wᵀ: one row per input column
    for (int64_t o = 0; o < h; ++o)
      for (int64_t i = 0; i < in; ++i) cols[i * h + o] = (*out)[o * in + i];
    QBC_RETURN_IF_ERROR(quant::apply_spin_r1(rotation, cols.data(), in));
    for (int64_t o = 0; o < h; ++o)
      for (int64_t i = 0; i < in; ++i) (*out)[o * in + i] = cols[i * h + o];
    return ok_status();
  });
}

}  // namespace

StatusOr<bool> has_vision_part(const std::string& model) {
  std::error_code ec;
  const fs::path config = fs::path(model) / "config.json";
  if (!fs::is_directory(model, ec) || !fs::is_regular_file(config, ec)) return false;
  StatusOr<std::optional<frontend::VisionConfig>> vc = frontend::load_vision_config(config);
  if (!vc.ok()) return vc.status().code() == Code::kUnimplemented;  // a VLM of another family
  return vc->has_value();
}

StatusOr<std::vector<std::string>> list_images(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found("--images ", dir, ": no such folder");
  std::vector<std::string> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file(ec)) continue;
    std::string ext = e.path().extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (ext == ".png" || ext == ".jpg" || ext == ".jpeg") out.push_back(e.path().string());
  }
  if (ec) return invalid_argument("--images ", dir, ": ", ec.message());
  if (out.empty()) return invalid_argument("--images ", dir, ": no .png, .jpg or .jpeg file");
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

/// What one family's tower takes: its rows, the rows the language model gets, the constant
/// inputs, the window order, and how the patch input is cut from a preprocessed image.
struct Tower {
  ir::Graph graph;
  int64_t side = 0;      ///< the compiled image size (pixels per side)
  int64_t rows = 0;      ///< input rows per image (the bundle's chunk)
  int64_t features = 0;  ///< output rows per image
  int64_t drop = 0;      ///< output rows dropped before the splice (CLIP's CLS)
  int64_t merge = 1;     ///< the language model's grid is the patch grid over this per side
  std::vector<std::pair<std::string, std::vector<float>>> constants;
  std::vector<int64_t> window_order;
  std::function<std::vector<float>(const image::Pixels&)> patches;
  /// How the prompt marks an image (mxq VisionPart): the user's token (-1: the image token),
  /// the ids around the image tokens, and the divisor of the features.
  int64_t prompt_token = -1;
  std::vector<int32_t> prefix, suffix;
  std::string prefix_text, suffix_text;  ///< encoded by the MXQ writer, outside prefix / suffix
  double feature_divisor = 0.0;
  /// Idefics3: tiles per side of the compiled image (the tower takes one tile a call; an image
  /// is that many tiles squared and a global view); 0 elsewhere.
  int64_t tiles_per_side = 0;
  std::string span_text;  ///< Idefics3: the processor's text of one image (VisionBuild)

  /// Calls of the tower per image.
  int64_t views() const { return tiles_per_side > 1 ? tiles_per_side * tiles_per_side + 1 : 1; }
  /// The square the preprocessing resizes an image to.
  int64_t image_side() const { return side * std::max<int64_t>(1, tiles_per_side); }
};

// The tower's short name in the vision MBLT's architecture ("qwen2_vl/qwen2-vit").
const char* tower_tag(frontend::VisionTower t) {
  switch (t) {
    case frontend::VisionTower::kQwen2Vit:
      return "qwen2-vit";
    case frontend::VisionTower::kQwen25Vit:
      return "qwen2.5-vit";
    case frontend::VisionTower::kQwen3Vit:
      return "qwen3-vit";
    case frontend::VisionTower::kSiglip:
      return "siglip";  // Gemma 3's and Idefics3's
    case frontend::VisionTower::kClip:
      return "clip";
  }
  return "?";
}

/// A tower with learned positions (CLIP, SigLIP): the folder's vision graph at vc.image_size
/// (CLIP's positions interpolated when that is not the table's size: clip_embed_base).
StatusOr<Tower> fixed_size_tower(const std::string& model, const frontend::VisionConfig& vc) {
  Tower t;
  QBC_ASSIGN_OR_RETURN(std::optional<ir::Graph> g, import_vision_graph(model, vc.image_size));
  if (!g) return internal_error(model, ": a vision_config but no vision graph");
  t.graph = std::move(*g);
  t.side = vc.image_size;
  return t;
}

StatusOr<Tower> clip_tower(const std::string& model, const frontend::VisionConfig& vc,
                           const frontend::SafetensorsCheckpoint& ck) {
  QBC_ASSIGN_OR_RETURN(Tower t, fixed_size_tower(model, vc));
  t.rows = t.features = frontend::llava_tower_rows(vc);  // CLIP: the CLS row first
  t.drop = vc.keeps_cls ? 0 : 1;
  QBC_ASSIGN_OR_RETURN(
      std::vector<float> base,
      frontend::clip_embed_base(vc, [&ck](const std::string& n, std::vector<float>* v) {
        return ck.read_f32(checkpoint_tensor_name(ck, n), v);
      }));
  t.constants.emplace_back("embed_base", std::move(base));
  const int64_t side = vc.image_size, patch = vc.patch_size;
  if (vc.tower == frontend::VisionTower::kSiglip) {
    t.patches = [side, patch](const image::Pixels& px) {
      return frontend::siglip_patch_rows(px.values, side, patch);
    };
    return t;
  }
  t.patches = [side, patch](const image::Pixels& px) {
    return frontend::clip_patch_rows(px.values, side, patch);
  };
  return t;
}

/// Gemma 3's SigLIP tower and projector at its fixed size (896: 4096 patch rows, no CLS row,
/// pooled 4 x 4 to 256 image tokens), the checkpoint's position table as the embed_base input.
/// The prompt marks an image with <start_of_image>, kept before the image tokens and closed by
/// <end_of_image> (Gemma3Processor); the features are divided by the language model's embedding
/// scale, sqrt(hidden_size), which its graph applies to every inputs_embeds row.
StatusOr<Tower> gemma3_tower(const std::string& model, const frontend::VisionConfig& vc,
                             const frontend::SafetensorsCheckpoint& ck) {
  QBC_ASSIGN_OR_RETURN(Tower t, fixed_size_tower(model, vc));
  const int64_t grid = vc.image_size / vc.patch_size;
  t.rows = grid * grid;
  t.features = t.rows / (vc.pool * vc.pool);
  std::vector<float> base;
  QBC_RETURN_IF_ERROR(ck.read_f32(t.graph.metadata["vision.embed_base"], &base));
  t.constants.emplace_back("embed_base", std::move(base));
  const int64_t side = vc.image_size, patch = vc.patch_size;
  t.patches = [side, patch](const image::Pixels& px) {
    return frontend::siglip_patch_rows(px.values, side, patch);
  };
  if (vc.image_start_token_id >= 0)
    t.prefix.push_back(static_cast<int32_t>(vc.image_start_token_id));
  if (vc.image_end_token_id >= 0) t.suffix.push_back(static_cast<int32_t>(vc.image_end_token_id));
  t.prompt_token = vc.image_start_token_id >= 0 ? vc.image_start_token_id : -1;
  t.prefix_text = t.suffix_text = "\n\n";  // Gemma3Processor's full_image_sequence
  t.feature_divisor = std::sqrt(static_cast<double>(vc.text_hidden));
  return t;
}

/// Idefics3Processor's text of one image of `tiles` x `tiles` tiles (0 or 1: the single view),
/// `tokens` <image> per view (_prompt_split_image / _prompt_single_image).
std::string idefics3_span_text(int64_t tiles, int64_t tokens) {
  std::string image;
  for (int64_t i = 0; i < tokens; ++i) image += "<image>";
  const std::string fake = "<fake_token_around_image>";
  std::string out;
  if (tiles > 1) {
    for (int64_t r = 1; r <= tiles; ++r) {
      for (int64_t c = 1; c <= tiles; ++c)
        out += fake + "<row_" + std::to_string(r) + "_col_" + std::to_string(c) + ">" + image;
      out += "\n";
    }
    out += "\n";
  }
  return out + fake + "<global-img>" + image + fake;
}

/// Idefics3 / SmolVLM: the SigLIP tower over one tile (1024 patches of 16 at 512 for SmolVLM),
/// the patches and positions in pixel-shuffle group order, scale² patches per image token; an
/// image is its tiles row by row and the global view, each a call.
StatusOr<Tower> idefics3_tower(const std::string& model, const frontend::VisionConfig& vc,
                               const frontend::SafetensorsCheckpoint& ck) {
  Tower t;
  QBC_ASSIGN_OR_RETURN(std::optional<ir::Graph> g, import_vision_graph(model, vc.image_size));
  if (!g) return internal_error(model, ": a vision_config but no vision graph");
  t.graph = std::move(*g);
  t.side = vc.tower_size();
  const int64_t grid = t.side / vc.patch_size;
  t.rows = grid * grid;
  t.merge = vc.merge;
  t.features = t.rows / (vc.merge * vc.merge);
  t.tiles_per_side = vc.image_size / vc.tile_size;
  QBC_ASSIGN_OR_RETURN(
      std::vector<float> base,
      frontend::idefics3_embed_base(vc, [&ck](const std::string& n, std::vector<float>* v) {
        return ck.read_f32(checkpoint_tensor_name(ck, n), v);
      }));
  t.constants.emplace_back("embed_base", std::move(base));
  const int64_t side = t.side, patch = vc.patch_size, scale = vc.merge;
  t.patches = [side, patch, scale](const image::Pixels& px) {
    return frontend::idefics3_patch_rows(px.values, side, patch, scale);
  };
  t.span_text = idefics3_span_text(t.tiles_per_side, t.features);
  return t;
}

/// Qwen2-VL, Qwen2.5-VL or Qwen3-VL at the default dynamic size (448x448: a 32 x 32 patch grid
/// of 14 pixels or 28 x 28 of 16, 256 or 196 image tokens): the patch rows (HF's pixel_values)
/// permuted into window order (Qwen2.5-VL; the others have no windows and keep HF's order), the
/// 2-D rope tables of the grid (and Qwen3-VL's interpolated position rows) as constants, 4
/// patches merged per token.
StatusOr<Tower> qwen_tower(const std::string& model, const frontend::VisionConfig& vc,
                           const frontend::SafetensorsCheckpoint& ck) {
  Tower t;
  t.side = vc.image_size;  // the default or vision.imageSize (set_image_size)
  QBC_ASSIGN_OR_RETURN(std::optional<ir::Graph> g, import_vision_graph(model, t.side));
  if (!g) return internal_error(model, ": a vision_config but no vision graph");
  t.graph = std::move(*g);
  const int64_t grid = t.side / vc.patch_size;
  QBC_ASSIGN_OR_RETURN(frontend::QwenVisionLayout layout,
                       frontend::qwen_vision_layout(vc, {1, grid, grid}));
  t.rows = grid * grid;
  t.merge = vc.merge;
  t.features = t.rows / (vc.merge * vc.merge);
  t.constants.emplace_back("rope_cos", std::move(layout.cos));
  t.constants.emplace_back("rope_sin", std::move(layout.sin));
  if (vc.tower == frontend::VisionTower::kQwen3Vit) {
    std::vector<float> table;
    QBC_RETURN_IF_ERROR(ck.read_f32(checkpoint_tensor_name(ck, "visual.pos_embed.weight"), &table));
    QBC_ASSIGN_OR_RETURN(std::vector<float> base,
                         frontend::qwen3_position_rows(vc, layout.grid, table));
    t.constants.emplace_back("embed_base", std::move(base));
  }
  if (vc.tower != frontend::VisionTower::kQwen25Vit) {
    t.patches = [](const image::Pixels& px) { return px.values; };
    return t;
  }
  t.window_order = layout.window_index;
  const int64_t group = vc.merge * vc.merge;
  t.patches = [group, order = std::move(layout.window_index)](const image::Pixels& px) {
    const int64_t width = px.shape.empty() ? 0 : px.shape.back();
    return frontend::qwen_window_rows(px.values, width, group, order, /*inverse=*/false);
  };
  return t;
}

/// A Qwen processor's square of `side` pixels within its min_pixels / max_pixels.
Status check_area(const image::PreprocessSpec& spec, int64_t side, const fs::path& pre_path) {
  const int64_t area = side * side;
  if ((spec.min_pixels > 0 && area < spec.min_pixels) ||
      (spec.max_pixels > 0 && area > spec.max_pixels)) {
    return invalid_argument("vision.imageSize ", side, ": ", area, " pixels, outside ",
                            pre_path.string(), "'s min_pixels ", spec.min_pixels, " / max_pixels ",
                            spec.max_pixels);
  }
  return ok_status();
}

/// The folder's preprocessing for `tower`: preprocessor_config.json parsed (its bytes kept in
/// `out`), the Qwen processors fixed to the compiled square, whose area must be within their
/// min_pixels / max_pixels.
StatusOr<image::PreprocessSpec> preprocessing(const fs::path& pre_path, const Tower& tower,
                                              const frontend::VisionConfig& vc, bool qwen,
                                              VisionBuild& out) {
  std::error_code ec;
  if (!fs::is_regular_file(pre_path, ec))
    return not_found(pre_path.string(),
                     ": missing; a VLM's MXQ carries its preprocessing (resize, crop, mean/std)");
  QBC_ASSIGN_OR_RETURN(out.preprocessor_json, read_text_file(pre_path.string()));
  QBC_ASSIGN_OR_RETURN(image::PreprocessSpec spec,
                       image::parse_preprocess_spec(out.preprocessor_json, pre_path.string()));
  if (spec.flattens_patches() != qwen)
    return invalid_argument(pre_path.string(), ": a ", spec.processor, " for the ",
                            frontend::vision_tower_name(vc.tower), " tower of ", vc.model_type);
  if (spec.flattens_patches()) QBC_RETURN_IF_ERROR(check_area(spec, tower.side, pre_path));
  if ((spec.rule == image::ResizeRule::kTiles) != (tower.tiles_per_side > 0))
    return invalid_argument(pre_path.string(), ": a ", spec.processor, " for the ",
                            frontend::vision_tower_name(vc.tower), " tower of ", vc.model_type);
  if (spec.rule == image::ResizeRule::kTiles && !spec.split && tower.tiles_per_side > 1)
    return invalid_argument(pre_path.string(), ": do_image_splitting is false, so an image is ",
                            "one view of ", tower.side, " pixels; vision.imageSize ",
                            tower.image_side(), " asks for ", tower.tiles_per_side,
                            " tiles per side (set vision.imageSize=", tower.side, ")");
  if (spec.rule == image::ResizeRule::kTiles && spec.tile != tower.side)
    return invalid_argument(pre_path.string(), ": max_image_size.longest_edge ", spec.tile,
                            " is not the tower's image_size ", tower.side,
                            " (config.json "
                            "vision_config.image_size)");
  // A shortest-edge resize keeps the aspect ratio: only a centre crop makes the square the
  // compiled tower takes.
  if (spec.rule == image::ResizeRule::kShortestEdge && !spec.center_crop)
    return invalid_argument(pre_path.string(),
                            ": size.shortest_edge without do_center_crop gives images of the "
                            "photograph's aspect ratio; the compiled tower takes ",
                            tower.side, "x", tower.side, " (set do_center_crop and crop_size)");
  spec.compiled_size = static_cast<int32_t>(tower.image_side());
  return spec;
}

/// Calibration samples: the user's images, else `synthetic` synthetic ones, through the
/// model's preprocessing; the graph's inputs in its order (the patches, then the constants by
/// name).
StatusOr<std::vector<quant::FeatureSample>> calibration_samples(
    const Tower& tower, const image::PreprocessSpec& spec, const std::string& pre_path,
    const std::vector<std::string>& images, int synthetic) {
  std::vector<quant::FeatureSample> samples;
  const auto add = [&](const image::Image& img, const std::string& name) -> Status {
    QBC_ASSIGN_OR_RETURN(const std::vector<image::Pixels> views,
                         image::preprocess_views(img, spec, name));
    if (static_cast<int64_t>(views.size()) != tower.views())
      return internal_error(pre_path, ": preprocessing gives ", views.size(),
                            " views of an image, the tower takes ", tower.views());
    for (const image::Pixels& px : views) {  // one sample per view (tile or global view)
      if (px.size.height != tower.side || px.size.width != tower.side)
        return invalid_argument(pre_path, ": preprocessing gives ", px.size.width, "x",
                                px.size.height, " images, the tower takes ", tower.side, "x",
                                tower.side);
      quant::FeatureSample sample;
      for (const ir::Node& n : tower.graph.nodes()) {
        if (n.op != ir::Op::kInput) continue;
        if (n.name == "patches") {
          sample.push_back(tower.patches(px));
          continue;
        }
        const auto c = std::find_if(tower.constants.begin(), tower.constants.end(),
                                    [&](const auto& kv) { return kv.first == n.name; });
        if (c == tower.constants.end())
          return internal_error(tower.graph.name(), ": no host values for input '", n.name, "'");
        sample.push_back(c->second);
      }
      samples.push_back(std::move(sample));
    }
    return ok_status();
  };
  for (const std::string& path : images) {
    QBC_ASSIGN_OR_RETURN(const image::Image img, image::decode_file(path));
    QBC_RETURN_IF_ERROR(add(img, path));
  }
  for (int i = 0; images.empty() && i < synthetic; ++i)
    QBC_RETURN_IF_ERROR(add(synthetic_image(static_cast<uint32_t>(i + 1), 480, 360),
                            "synthetic image " + std::to_string(i + 1)));
  return samples;
}

/// A VLM folder's tower, opened: its vision config (at vision.imageSize), the checkpoint's
/// weight reader and the family's Tower.
struct FolderTower {
  frontend::VisionConfig vc;
  std::shared_ptr<frontend::SafetensorsCheckpoint> ckpt;
  ir::WeightReader reader;
  Tower tower;
  bool qwen = false;
};

/// The tower of the HF folder `model`: nullopt when it has no vision_config, kUnimplemented for
/// a family whose tower is not built yet.
StatusOr<std::optional<FolderTower>> open_tower(const std::string& model,
                                                const config::ResolvedConfig& cfg) {
  std::error_code ec;
  const fs::path config = fs::path(model) / "config.json";
  if (!fs::is_directory(model, ec) || !fs::is_regular_file(config, ec))
    return std::optional<FolderTower>();
  QBC_ASSIGN_OR_RETURN(std::optional<frontend::VisionConfig> vc,
                       frontend::load_vision_config(config));
  if (!vc) return std::optional<FolderTower>();
  const bool qwen = frontend::builds_qwen_vision_graph(vc->tower);
  const bool gemma3 = frontend::builds_gemma3_vision_graph(*vc);
  const bool idefics3 = frontend::builds_idefics3_vision_graph(*vc);
  QBC_RETURN_IF_ERROR(frontend::check_vision_tower_built(*vc, config.string()));
  QBC_RETURN_IF_ERROR(
      frontend::set_image_size(*vc, cfg.options.vision().image_size(), "vision.imageSize"));
  FolderTower ft;
  ft.qwen = qwen;
  QBC_ASSIGN_OR_RETURN(frontend::SafetensorsCheckpoint ck,
                       frontend::SafetensorsCheckpoint::open(model));
  ft.ckpt = std::make_shared<frontend::SafetensorsCheckpoint>(std::move(ck));
  const frontend::TensorFloats read = [ckpt = ft.ckpt](const std::string& n,
                                                       std::vector<float>* v) {
    return ckpt->read_f32(n, v);
  };
  // Gemma 3's projector weight is stored [in, out]: its reader transposes it.
  ft.reader = [read, gemma3](const ir::Weight& w, std::vector<float>* v) {
    return gemma3 ? frontend::gemma3_read_vision_weight(read, w, v) : read(w.tensor, v);
  };
  QBC_ASSIGN_OR_RETURN(ft.tower, qwen       ? qwen_tower(model, *vc, *ft.ckpt)
                                 : gemma3   ? gemma3_tower(model, *vc, *ft.ckpt)
                                 : idefics3 ? idefics3_tower(model, *vc, *ft.ckpt)
                                            : clip_tower(model, *vc, *ft.ckpt));
  ft.vc = std::move(*vc);
  return std::optional<FolderTower>(std::move(ft));
}

}  // namespace

StatusOr<FloatImageFeatures> float_image_features(const std::string& model,
                                                  const config::ResolvedConfig& cfg,
                                                  const std::vector<std::string>& images) {
  QBC_ASSIGN_OR_RETURN(std::optional<FolderTower> ft, open_tower(model, cfg));
  if (!ft)
    return invalid_argument(model,
                            ": --images needs a VLM folder (a config.json with a "
                            "vision_config)");
  const Tower& tower = ft->tower;
  FloatImageFeatures out;
  out.tokens = (tower.features - tower.drop) * tower.views();
  out.width = ft->vc.text_hidden;
  out.deepstack_levels = static_cast<int64_t>(ft->vc.deepstack_layers.size());
  const int64_t row = out.width * (1 + out.deepstack_levels);
  out.prefix = tower.prefix;
  out.suffix = tower.suffix;
  // Where the user types the markers around the image tokens themselves (Qwen's
  // <|vision_start|> <|image_pad|> <|vision_end|>), the samples carry them too.
  if (out.prefix.empty() && out.suffix.empty() && tower.prompt_token < 0 &&
      ft->vc.image_start_token_id >= 0 && ft->vc.image_end_token_id >= 0) {
    out.prefix = {static_cast<int32_t>(ft->vc.image_start_token_id)};
    out.suffix = {static_cast<int32_t>(ft->vc.image_end_token_id)};
  }
  out.prefix_text = tower.prefix_text;
  out.suffix_text = tower.suffix_text;
  out.span_text = tower.span_text;
  out.image_token = ft->vc.image_token_id;
  if (images.empty()) return out;  // the span's layout alone
  VisionBuild unused;
  const fs::path pre_path = fs::path(model) / kPreprocessorAsset;
  QBC_ASSIGN_OR_RETURN(const image::PreprocessSpec spec,
                       preprocessing(pre_path, tower, ft->vc, ft->qwen, unused));
  QBC_ASSIGN_OR_RETURN(const std::vector<quant::FeatureSample> samples,
                       calibration_samples(tower, spec, pre_path.string(), images, 0));
  QBC_ASSIGN_OR_RETURN(std::unique_ptr<ref::Session> session,
                       ref::Session::create(tower.graph, ft->reader));
  const auto views = static_cast<size_t>(tower.views());
  if (samples.size() != images.size() * views)
    return internal_error(tower.graph.name(), ": ", samples.size(), " tower calls for ",
                          images.size(), " images of ", views, " views");
  for (size_t image = 0; image < images.size(); ++image) {
    std::vector<float> all;
    for (size_t v = 0; v < views; ++v) {  // the views' rows in order, as VisionEncoder gives them
      std::vector<float> rows;
      QBC_RETURN_IF_ERROR(
          session->forward_inputs(samples[image * views + v], &rows).with_context(images[image]));
      if (static_cast<int64_t>(rows.size()) != tower.features * row)
        return internal_error(tower.graph.name(), ": ", rows.size(), " feature values for ",
                              images[image], ", expected ", tower.features, " x ", row);
      // A tower in window order gives its tokens in that order: back to the image's (runtime
      // VisionEncoder does the same).
      if (!tower.window_order.empty())
        rows = frontend::qwen_window_rows(rows, row, 1, tower.window_order, true);
      rows.erase(rows.begin(), rows.begin() + tower.drop * row);
      if (tower.feature_divisor > 0) {  // the feature row only, as VisionEncoder divides
        const auto d = static_cast<float>(tower.feature_divisor);
        for (size_t r = 0; r < rows.size(); r += static_cast<size_t>(row))
          for (int64_t c = 0; c < out.width; ++c) rows[r + static_cast<size_t>(c)] /= d;
      }
      all.insert(all.end(), rows.begin(), rows.end());
    }
    out.rows.push_back(std::move(all));
  }
  return out;
}

Status check_vision_image_size(const std::string& model, int64_t image_size) {
  if (image_size == 0) return ok_status();
  std::error_code ec;
  const fs::path config = fs::path(model) / "config.json";
  std::optional<frontend::VisionConfig> vc;
  if (fs::is_directory(model, ec) && fs::is_regular_file(config, ec)) {
    QBC_ASSIGN_OR_RETURN(vc, frontend::load_vision_config(config));
  }
  if (!vc)
    return invalid_argument("vision.imageSize ", image_size, ": ", model,
                            " has no vision part (no vision_config in a config.json)");
  QBC_RETURN_IF_ERROR(frontend::set_image_size(*vc, image_size, "vision.imageSize"));
  const fs::path pre_path = fs::path(model) / kPreprocessorAsset;
  if (!vc->dynamic_resolution || !fs::is_regular_file(pre_path, ec)) return ok_status();
  QBC_ASSIGN_OR_RETURN(const std::string json, read_text_file(pre_path.string()));
  QBC_ASSIGN_OR_RETURN(const image::PreprocessSpec spec,
                       image::parse_preprocess_spec(json, pre_path.string()));
  return spec.flattens_patches() ? check_area(spec, image_size, pre_path) : ok_status();
}

StatusOr<std::optional<VisionBuild>> build_vision_part(
    const std::string& model, const config::ResolvedConfig& cfg, const npu::Options& language,
    const std::vector<std::string>& images, int synthetic, const quant::OutputBasis* rotation) {
  QBC_ASSIGN_OR_RETURN(std::optional<FolderTower> ft, open_tower(model, cfg));
  if (!ft) return std::optional<VisionBuild>();
  const frontend::VisionConfig* vc = &ft->vc;
  const bool rotated = rotation != nullptr && rotation->spin_r1_seed.has_value();
  if (rotated && rotation->hidden != vc->text_hidden)
    return internal_error(model, ": the language model's rotation is of order ", rotation->hidden,
                          ", the vision part writes ", vc->text_hidden, " columns");
  QBC_ASSIGN_OR_RETURN(const ir::WeightReader reader,
                       rotated ? rotated_output_reader(ft->tower.graph, ft->reader, *rotation)
                               : StatusOr<ir::WeightReader>(ft->reader));
  Tower& tower = ft->tower;
  VisionBuild out;
  const fs::path pre_path = fs::path(model) / kPreprocessorAsset;
  QBC_ASSIGN_OR_RETURN(const image::PreprocessSpec spec,
                       preprocessing(pre_path, tower, *vc, ft->qwen, out));
  QBC_ASSIGN_OR_RETURN(const std::vector<quant::FeatureSample> samples,
                       calibration_samples(tower, spec, pre_path.string(), images, synthetic));
  out.synthetic_calibration = images.empty();
  out.calibration_images = static_cast<int>(samples.size() / static_cast<size_t>(tower.views()));

  QBC_ASSIGN_OR_RETURN(quant::QuantizeResult q,
                       quant::quantize_vision(tower.graph, reader, samples, cfg.options));
  auto qr = std::make_shared<const quant::QuantizeResult>(std::move(q));
  events::status("vision", "comparing the quantized tower's blocks with the float tower's");
  QBC_ASSIGN_OR_RETURN(out.block_errors,
                       tower_block_errors(tower.graph, reader, qr->graph,
                                          quant::with_sidecar(reader, *qr), samples));
  if (!out.block_errors.empty())
    log("vision").info(
        "{}: tower SQNR per block (quantized against float, {} calibration "
        "samples): {}",
        tower.graph.name(), std::min(samples.size(), kTowerErrorSamples),
        tower_block_text(out.block_errors));
  npu::Options o;
  o.target = language.target;
  for (npu::ModeRequest m : language.modes) {
    m.instances = 1;  // one image at a time
    o.modes.push_back(m);
  }
  o.chunk = tower.rows;
  o.max_cache = tower.rows;
  QBC_ASSIGN_OR_RETURN(out.bundle, npu::compile(qr->graph, quant::with_sidecar(reader, *qr), o));
  QBC_RETURN_IF_ERROR(isa::verify(out.bundle));
  if (out.bundle.output_rows != tower.features)
    return internal_error(tower.graph.name(), ": ", out.bundle.output_rows,
                          " feature rows per image, expected ", tower.features);
  out.graph_name = tower.graph.name();
  out.architecture = vc->model_type + "/" + tower_tag(vc->tower);
  out.constants = std::move(tower.constants);
  out.window_order = std::move(tower.window_order);

  mxq::pb::VisionPart& p = out.part;
  p.set_family(vc->model_type);
  p.set_image_token_id(static_cast<int32_t>(vc->image_token_id));
  p.set_drop_front_rows(tower.drop);
  p.set_tokens_per_image((tower.features - tower.drop) * tower.views());
  p.set_tiles_per_side(static_cast<int32_t>(tower.tiles_per_side));
  p.set_feature_rows(tower.features);
  p.set_feature_width(vc->text_hidden);
  p.set_image_size(tower.side);
  p.set_patch_size(vc->patch_size);
  p.set_merge_size(tower.merge);
  p.set_preprocessor_asset(kPreprocessorAsset);
  if (tower.prompt_token >= 0) p.set_prompt_token_id(static_cast<int32_t>(tower.prompt_token));
  for (int32_t id : tower.prefix) p.add_image_prefix_ids(id);
  for (int32_t id : tower.suffix) p.add_image_suffix_ids(id);
  p.set_feature_divisor(tower.feature_divisor);
  p.set_deepstack_levels(static_cast<int32_t>(vc->deepstack_layers.size()));
  if (rotated) p.set_language_rotation_seed(*rotation->spin_r1_seed);
  out.prefix_text = tower.prefix_text;
  out.suffix_text = tower.suffix_text;
  out.span_text = tower.span_text;
  nlohmann::json cal = {{"images", out.calibration_images},
                        {"source", out.synthetic_calibration ? "synthetic" : "files"},
                        {"mode", cfg.options.calibration().mode()}};
  if (!images.empty()) {
    nlohmann::json names = nlohmann::json::array();
    for (const std::string& path : images) names.push_back(fs::path(path).filename().string());
    cal["files"] = names;
  }
  if (!out.block_errors.empty()) {
    cal["block_sqnr_db"] = tower_block_json(out.block_errors);
    cal["block_sqnr_samples"] = std::min(samples.size(), kTowerErrorSamples);  // tower calls
  }
  out.calibration_json = cal.dump();
  p.set_calibration(out.calibration_json);
  return std::optional<VisionBuild>(std::move(out));
}

}  // namespace qbc::driver
