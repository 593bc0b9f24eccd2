// Which vision towers are built (see qbc/frontend/vision_towers.h).
#include "qbc/frontend/vision_towers.h"

#include "qbc/frontend/clip_vision.h"
#include "qbc/frontend/gemma3_vision.h"
#include "qbc/frontend/idefics3_vision.h"
#include "qbc/frontend/qwen_vision.h"

namespace qbc::frontend {

bool builds_vision_graph(const VisionConfig& vc) {
  return builds_qwen_vision_graph(vc.tower) || builds_clip_vision_graph(vc) ||
         builds_gemma3_vision_graph(vc) || builds_idefics3_vision_graph(vc);
}

Status check_vision_tower_built(const VisionConfig& vc, const std::string& config) {
  if (builds_vision_graph(vc)) return ok_status();
  return unimplemented(config, ": the ", vision_tower_name(vc.tower), " vision tower of ",
                       vc.model_type, " is not parsed yet",
                       " (Qwen2-VL's, Qwen2.5-VL's, Qwen3-VL's, LLaVA's CLIP, Gemma 3's and "
                       "Idefics3's SigLIP are; docs/multimodal.md)");
}

}  // namespace qbc::frontend
