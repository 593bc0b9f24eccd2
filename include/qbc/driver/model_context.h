// The context length a model was trained for, and the sequence and cache lengths a
// configuration takes from it. The presets say 4096 positions; a model trained for fewer
// (stories260K: 2048) gets its own length unless the user asked for more, so the README's
// compile neither warns nor pays for positions the model never saw.
#pragma once

#include <cstdint>
#include <string>

#include "qbc/config/config.h"
#include "qbc/frontend/hparams.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// Positions a model was trained for, and where that figure comes from.
struct TrainedContext {
  int64_t positions = 0;  ///< 0: unknown
  /// "max_position_embeddings", or the rope_scaling extension that reaches further
  /// ("rope_scaling yarn: factor 4 x original_max_position_embeddings 32768").
  std::string source;
};

/// max_position_embeddings, or original_max_position_embeddings x factor of a linear or YaRN
/// rope_scaling when that is longer (Qwen2.5 with YaRN keeps max_position_embeddings at the
/// original 32768).
TrainedContext trained_context(const frontend::HParams& hp);

/// The trained context of the model at `path`: a model folder or config.json (the JSON
/// only), a .gguf (its metadata) or an .mblt (the config.json recorded at import, capped by
/// the KV-cache capacity its graph was built with: a longer cache cannot be lowered from
/// it). No weight is read and no file hashed, so callers decide lengths before heavy work.
StatusOr<TrainedContext> model_trained_context(const std::string& path);

/// Lowers llm.attributes.maxSequenceLength and maxCacheLength to `trained.positions` where
/// they are longer and came from a preset or the built-in defaults; a value from a config
/// file, --set or a flag is kept (quantize then warns that it is past the trained length).
/// The changed keys get the origin "model: ...". Returns a note saying what changed (for the
/// log), empty when nothing did.
std::string fit_lengths_to_model(const TrainedContext& trained, config::ResolvedConfig* cfg);

}  // namespace qbc::driver
