// The vision part of `qbc plan` (qbc/driver/plan.h, VisionPlan): from config.json's
// vision_config alone, an estimate beside the text model's plan.
#include <filesystem>
#include <string>

#include "qbc/driver/plan.h"
#include "qbc/frontend/hparams.h"
#include "qbc/frontend/vision_config.h"
#include "qbc/npu/memory_plan.h"

namespace qbc::driver {

StatusOr<VisionPlan> vision_plan(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path config = path;
  if (fs::is_directory(config, ec)) config /= "config.json";
  if (config.extension() != ".json" || !fs::is_regular_file(config, ec)) return VisionPlan{};
  QBC_ASSIGN_OR_RETURN(const std::optional<frontend::VisionConfig> c,
                       frontend::load_vision_config(config));
  VisionPlan v;
  if (!c.has_value()) return v;
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
  return v;
}

std::string vision_plan_text(const VisionPlan& v) {
  if (!v.present) return "";
  const std::string size = std::to_string(v.image_size) + "x" + std::to_string(v.image_size);
  return "vision (estimate, not in the memory plan above; its time is not modelled yet): " +
         v.tower + " " + std::to_string(v.depth) + " layers x " + std::to_string(v.width) + " + " +
         v.projector + ", " + std::to_string(v.parameters) + " parameters, weights " +
         npu::human_bytes(v.weight_bytes) + " at 8 bits (" + npu::human_bytes(v.source_bytes) +
         " in the checkpoint); " + std::to_string(v.tokens_per_image) + " tokens per " + size +
         " image" + (v.dynamic_resolution ? " (dynamic resolution: planned at " + size + ")" : "") +
         "\n";
}

}  // namespace qbc::driver
