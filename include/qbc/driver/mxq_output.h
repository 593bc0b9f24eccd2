// The MXQ step of the driver: a compiled isa::Bundle of a quantized model written as MXQ
// (docs/mxq.md), with the metadata the runtime needs (configuration, provenance, io, KV
// layout, token ids) and the host assets (tokenizer files or the qbc_vocab.json of a GGUF
// vocabulary, generation config, chat template).
#pragma once

#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/driver/model_loader.h"
#include "qbc/driver/vision_part.h"
#include "qbc/isa/program.h"
#include "qbc/mxq/model_file.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// Decoder blocks of `g` (one more than the highest Node::block).
int block_count(const ir::Graph& g);

/// The split boundaries of `cfg` (splitBlocks, or splitParts turned into equal block
/// counts) for the blocks of `g`; empty for no split. Errors name the key.
StatusOr<std::vector<int>> split_boundaries(const config::ResolvedConfig& cfg, const ir::Graph& g);

/// Writes `bundle` (compiled from `model`) to `path`: one MXQ, or the manifest of a split
/// build with its parts beside it. A VLM's `vision` part goes in as the vision section of the
/// first file (a single-file MXQ of its own, written first, whose model hash the language
/// part's metadata records). Returns the files written, the loadable one last.
StatusOr<std::vector<mxq::WrittenFile>> write_mxq(const LoadedModel& model,
                                                  const isa::Bundle& bundle,
                                                  const config::ResolvedConfig& cfg,
                                                  const std::string& path,
                                                  const VisionBuild* vision = nullptr);

}  // namespace qbc::driver
