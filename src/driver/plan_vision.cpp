// The vision part of `qbc plan` (qbc/driver/plan.h, VisionPlan): from config.json's
// vision_config alone, an estimate beside the text model's plan.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

#include "qbc/driver/plan.h"
#include "qbc/frontend/clip_vision.h"
#include "qbc/frontend/hparams.h"
#include "qbc/frontend/vision_config.h"
#include "qbc/npu/memory_plan.h"

namespace qbc::driver {
namespace {

using frontend::VisionConfig;
using frontend::VisionProjector;
using frontend::VisionTower;

// Element operations of the vector unit per value: a norm (mean, variance, normalize, scale
// and shift), a softmax entry (max, exponent, sum, divide), a GELU, a residual add, a rotary
// pair (two multiplies and an add per value).
constexpr int64_t kNormOps = 5, kSoftmaxOps = 4, kGeluOps = 1, kAddOps = 1, kRopeOps = 3;
// Activations between ops are fp16 in DRAM (written once, read once).
constexpr int64_t kActBytes = 2;

bool is_qwen(const VisionConfig& c) {
  return c.tower == VisionTower::kQwen2Vit || c.tower == VisionTower::kQwen25Vit ||
         c.tower == VisionTower::kQwen3Vit;
}

/// Adds one linear of `rows` rows, `in` -> `out`, to `w`.
void add_linear(VisionWork& w, int64_t rows, int64_t in, int64_t out, bool i16) {
  (i16 ? w.macs_i16 : w.macs_i8) += rows * in * out;
  w.weight_bytes += in * out;
  w.activation_traffic_bytes += rows * (in + out) * kActBytes;
}

StatusOr<VisionWork> count_work(const VisionConfig& c) {
  VisionWork w;
  // One call of the tower (one view); an image of several views repeats it (scaled below).
  const int64_t side = c.tower_size() / c.patch_size, width = c.width, t = c.text_hidden;
  const int64_t patch_in = 3 * c.temporal_patch_size * c.patch_size * c.patch_size;
  w.rows = side * side + (c.tower == VisionTower::kClip ? 1 : 0);
  w.tokens = c.tokens_per_view();
  w.layers = c.depth;
  if (c.projector == VisionProjector::kLlavaMlp) {  // LLaVA: up to vision_feature_layer
    QBC_ASSIGN_OR_RETURN(w.layers, frontend::clip_used_layers(c));
  }
  const int64_t n = w.rows;
  add_linear(w, n, patch_in, width, /*i16=*/true);  // the patch embedding
  const bool swiglu = c.tower == VisionTower::kQwen25Vit;
  const int64_t window_rows = c.tower == VisionTower::kQwen25Vit && c.window_size > 0
                                  ? (c.window_size / c.patch_size) * (c.window_size / c.patch_size)
                                  : 0;
  for (int64_t l = 0; l < w.layers; ++l) {
    const bool full = window_rows == 0 ||
                      std::find(c.full_attention_blocks.begin(), c.full_attention_blocks.end(),
                                l) != c.full_attention_blocks.end();
    const int64_t keys = full ? n : std::min(n, window_rows);
    add_linear(w, n, width, 3 * width, false);                // q, k, v
    add_linear(w, n, width, width, false);                    // out
    w.macs_i8 += 2 * n * keys * width;                        // QK^T and PV of every head
    w.activation_traffic_bytes += 4 * n * width * kActBytes;  // q, k, v read, output written
    w.vector_ops += c.heads * n * keys * kSoftmaxOps + 2 * n * width * (kNormOps + kAddOps);
    if (is_qwen(c)) w.vector_ops += 2 * n * width * kRopeOps;  // q and k rotated
    add_linear(w, n, width, (swiglu ? 2 : 1) * c.ffn, false);  // fc1 (gate and up)
    add_linear(w, n, c.ffn, width, false);                     // fc2 (down)
    w.vector_ops += n * c.ffn * (kGeluOps + (swiglu ? 1 : 0));
  }
  switch (c.projector) {
    case VisionProjector::kLlavaMlp: {
      const int64_t rows = w.tokens;
      add_linear(w, rows, width, t, false);
      w.vector_ops += rows * t * kGeluOps;
      add_linear(w, rows, t, t, true);
      break;
    }
    case VisionProjector::kGemmaSoftEmb:
      w.vector_ops += n * width * (kNormOps + 1) + w.tokens * width * kNormOps;  // post LN, pool
      add_linear(w, w.tokens, width, t, true);
      break;
    case VisionProjector::kPixelShuffle:  // post LN; the shuffle is a reshape of the rows
      w.vector_ops += n * width * kNormOps;
      add_linear(w, w.tokens, c.merge * c.merge * width, t, true);
      break;
    case VisionProjector::kQwenMerger: {
      const int64_t m = c.merge * c.merge * width;
      const int64_t mergers = 1 + static_cast<int64_t>(c.deepstack_layers.size());
      for (int64_t i = 0; i < mergers; ++i) {
        w.vector_ops += n * width * kNormOps + w.tokens * m * kGeluOps;
        add_linear(w, w.tokens, m, m, false);
        add_linear(w, w.tokens, m, t, true);
      }
      break;
    }
  }
  const int64_t widest = std::max(3 * width, (swiglu ? 2 : 1) * c.ffn);
  w.activation_bytes = n * patch_in * kActBytes + n * (width + widest) * kActBytes +
                       w.tokens * t * static_cast<int64_t>(sizeof(float));
  w.views = c.views();
  // Every view's feature rows wait for the language model.
  w.activation_bytes += (w.views - 1) * w.tokens * t * static_cast<int64_t>(sizeof(float));
  w.tokens *= w.views;
  w.macs_i8 *= w.views;
  w.macs_i16 *= w.views;
  w.vector_ops *= w.views;
  w.activation_traffic_bytes *= w.views;
  return w;
}

std::string ms(double s) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.1f ms", s * 1e3);
  return b;
}

}  // namespace

VisionTime vision_time(const VisionWork& w, const npu::CostParams& p, int cores) {
  VisionTime v;
  const double c = std::max(cores, 1);
  v.mac_s = w.macs_i8 / (p.int8_macs_per_cycle * p.clock_hz * p.mac_efficiency * c) +
            w.macs_i16 / (p.int16_macs_per_cycle * p.clock_hz * p.mac_efficiency * c);
  v.dram_s = static_cast<double>(w.weight_bytes * w.views + w.activation_traffic_bytes) /
             (p.dram_bytes_per_s * p.dram_efficiency);
  v.vector_s = w.vector_ops / (p.vector_ops_per_cycle * p.clock_hz * c);
  const double busy = std::max({v.mac_s, v.dram_s, v.vector_s});
  v.bound = npu::bound_of(v.dram_s, v.mac_s, v.vector_s, busy);
  v.seconds = busy + p.host_s * static_cast<double>(w.views);
  return v;
}

StatusOr<VisionPlan> vision_plan(const std::string& path, int64_t image_size) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path config = path;
  if (fs::is_directory(config, ec)) config /= "config.json";
  if (config.extension() != ".json" || !fs::is_regular_file(config, ec)) return VisionPlan{};
  QBC_ASSIGN_OR_RETURN(std::optional<frontend::VisionConfig> c,
                       frontend::load_vision_config(config));
  VisionPlan v;
  if (!c.has_value()) return v;
  QBC_RETURN_IF_ERROR(frontend::set_image_size(*c, image_size, "vision.imageSize"));
  v.present = true;
  v.tower = std::string(frontend::vision_tower_name(c->tower));
  v.projector = std::string(frontend::vision_projector_name(c->projector));
  v.depth = c->depth;
  v.width = c->width;
  v.parameters = c->parameters();
  v.weight_bytes = v.parameters;
  const StatusOr<int> bits = frontend::torch_dtype_bits(c->source_dtype);
  v.source_bytes = v.parameters * (bits.ok() ? *bits : 16) / 8;
  v.image_size = c->image_size;
  v.tokens_per_image = c->tokens_per_image();
  v.dynamic_resolution = c->dynamic_resolution;
  QBC_ASSIGN_OR_RETURN(v.work, count_work(*c));
  return v;
}

std::string vision_plan_text(const VisionPlan& v) {
  if (!v.present) return "";
  const std::string size = std::to_string(v.image_size) + "x" + std::to_string(v.image_size);
  const VisionWork& w = v.work;
  char gmacs[64];
  std::snprintf(gmacs, sizeof(gmacs), "%.1f GMAC (%.1f at 16-bit activations)",
                (w.macs_i8 + w.macs_i16) * 1e-9, w.macs_i16 * 1e-9);
  return "vision (estimate): " + v.tower + " " + std::to_string(v.depth) + " layers x " +
         std::to_string(v.width) + " + " + v.projector + ", " + std::to_string(v.parameters) +
         " parameters, weights " + npu::human_bytes(v.weight_bytes) + " at 8 bits (" +
         npu::human_bytes(v.source_bytes) + " in the checkpoint); " +
         std::to_string(v.tokens_per_image) + " tokens per " + size + " image" +
         (v.dynamic_resolution ? " (dynamic resolution: planned at " + size + ")" : "") +
         (w.views > 1 ? " (" + std::to_string(w.views - 1) + " tiles and a global view)" : "") +
         "; per image " + (w.views > 1 ? std::to_string(w.views) + " x " : "") +
         std::to_string(w.rows) + " rows through " + std::to_string(w.layers) + " layers, " +
         gmacs + ", activations " + npu::human_bytes(w.activation_bytes) + " in DRAM, " +
         npu::human_bytes(w.weight_bytes * w.views + w.activation_traffic_bytes) +
         " of DRAM traffic\n";
}

int64_t vision_dram_bytes(const VisionPlan& v) {
  return v.present ? v.weight_bytes + v.work.activation_bytes : 0;
}

std::string vision_schemes_text(const PlanResult& r) {
  if (!r.vision.present || r.schemes.empty() || r.vision.work.tokens == 0) return "";
  std::string out =
      "with one image (estimates; the tower counted analytically, not lowered: "
      "docs/performance.md \"Vision towers in plan\"):\n";
  char line[256];
  std::snprintf(line, sizeof(line), "%-8s %12s %12s %10s %18s\n", "scheme", "cores x inst",
                "vision ms", "bound", "TTFT+image ms");
  out += line;
  for (const SchemePlan& s : r.schemes) {
    const std::string cores = std::to_string(s.cores) + " x " + std::to_string(s.instances);
    std::snprintf(line, sizeof(line), "%-8s %12s %12.1f %10s %18.1f\n", isa::scheme_name(s.scheme),
                  cores.c_str(), s.vision.seconds * 1e3, npu::bound_name(s.vision.bound),
                  (s.vision.seconds + s.image_prediction.ttft_s) * 1e3);
    out += line;
  }
  out += "TTFT+image: the tower's time, then the prefill of " +
         std::to_string(r.schemes.front().image_prediction.prompt_tokens) +
         " tokens (the prompt and the image's " + std::to_string(r.vision.tokens_per_image) +
         "); e.g. " + ms(r.schemes.front().vision.seconds) + " + " +
         ms(r.schemes.front().image_prediction.ttft_s) + " on " +
         isa::scheme_name(r.schemes.front().scheme) + "\n";
  return out;
}

}  // namespace qbc::driver
