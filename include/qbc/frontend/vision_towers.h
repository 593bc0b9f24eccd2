// Which vision towers qbc builds a graph for (Qwen2-VL / Qwen2.5-VL, LLaVA's CLIP, Gemma 3's
// SigLIP; docs/multimodal.md "Families"), and the one refusal for the others, shared by the
// vision import (`qbc parse`) and the VLM compile.
#pragma once

#include <string>

#include "qbc/frontend/vision_config.h"
#include "qbc/support/status.h"

namespace qbc::frontend {

/// Whether qbc builds the vision graph of `vc`.
bool builds_vision_graph(const VisionConfig& vc);

/// OK when qbc builds the vision graph of `vc`; else kUnimplemented naming `config`, the tower,
/// the model type and the towers that are built.
Status check_vision_tower_built(const VisionConfig& vc, const std::string& config);

}  // namespace qbc::frontend
