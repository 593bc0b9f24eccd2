// The vision part of a VLM folder as its own MBLT graph, written by `qbc parse` next to the
// language graph (docs/multimodal.md, "The vision graph").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "qbc/frontend/safetensors.h"
#include "qbc/ir/graph.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// The vision graph of the HF folder `model` for an image_size x image_size image (0: the
/// model's default, frontend::kDefaultDynamicImageSize for the dynamic-resolution towers), with
/// its provenance (source folder, files, config.json, the grid). nullopt when `model` is not a
/// folder whose config.json has a vision_config. kUnimplemented naming the tower for towers
/// other than Qwen2-VL's, Qwen2.5-VL's, LLaVA's CLIP and Gemma 3's SigLIP;
/// frontend::set_image_size's errors (naming vision.imageSize) for a size the tower cannot
/// take; kNotFound / kInvalidArgument naming the tensor when a weight is missing or misshapen.
StatusOr<std::optional<ir::Graph>> import_vision_graph(const std::string& model,
                                                       int64_t image_size = 0);

/// The checkpoint's name of the tower or projector tensor HF calls `hf` (transformers < 4.52):
/// `hf` itself, or "model." + hf when only that is stored (transformers >= 4.52 saves
/// `model.visual.*`, `model.vision_tower.*`, `model.multi_modal_projector.*`).
std::string checkpoint_tensor_name(const frontend::SafetensorsCheckpoint& ck,
                                   const std::string& hf);

/// "x.mblt" -> "x.vision.mblt".
std::string vision_mblt_path(const std::string& mblt_path);

}  // namespace qbc::driver
