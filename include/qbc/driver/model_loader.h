// Loading what users point qbc at: an HF folder, a .gguf file, or an MBLT file
// produced by `qbc parse`. The driver is the only layer that sees every stage.
#pragma once

#include <memory>
#include <string>

#include "qbc/config/config.h"
#include "qbc/frontend/model_source.h"
#include "qbc/frontend/safetensors.h"
#include "qbc/ir/graph.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// A graph plus the model files its weights come from.
struct LoadedModel {
  ir::Graph graph;
  std::shared_ptr<frontend::ModelSource> source;
  /// Weights a pass rewrote (quantized weights and scales), when the graph has any.
  std::shared_ptr<frontend::SafetensorsCheckpoint> sidecar;
};

/// The sidecar file that holds an .mblt's rewritten weights: "x.mblt" -> "x.weights.safetensors".
std::string sidecar_path(const std::string& mblt_path);

/// Imports an HF folder or .gguf: opens it, checks every tensor against the
/// architecture, builds and verifies the MBLT graph, and records provenance
/// (files with hashes, config.json, the effective configuration).
StatusOr<LoadedModel> import_model(const std::string& path, const config::ResolvedConfig& config);

/// Opens `path`: an .mblt file (re-opening the source model it names, and
/// checking its files' sizes against the recorded provenance) or a model to import.
StatusOr<LoadedModel> open_model(const std::string& path, const config::ResolvedConfig& config);

/// True when `path` looks like an MBLT file (by extension or magic-free check).
bool is_mblt_path(const std::string& path);

/// Reads the float32 data of a graph weight from the model (or sidecar).
Status read_weight(const LoadedModel& model, const ir::Weight& w, std::vector<float>* out);

}  // namespace qbc::driver
