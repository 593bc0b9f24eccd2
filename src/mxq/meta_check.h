// The metadata of an MXQ against its layout: every field of pb::Meta that restates the layout
// (the KV layers, the io specs, the modes, the target, the token ids) must say what the
// layout says. A reader that trusted either copy alone would let a file lie in the other.
#pragma once

#include <string>

#include "mxq_meta.pb.h"
#include "qbc/isa/program.h"
#include "qbc/mxq/model_file.h"
#include "qbc/support/status.h"

namespace qbc::mxq {

/// kDataLoss naming `where` (the metadata section) and the first field that differs from
/// `b`, the bundle decoded from the layout.
Status check_meta_against_layout(const pb::Meta& meta, const isa::Bundle& b,
                                 const std::string& where);

/// A VLM's language part (`meta`, `b`, its `assets`) against the vision part loaded from its
/// vision section: the vision file is the one meta.vision names (its model hash), was
/// compiled from the same config.json for the same target, and its feature rows fit the
/// language model (width = hidden, rows = tokens per image + dropped rows, the image token a
/// row of the embedding). kDataLoss naming `where` and what differs.
Status check_vision_pair(const pb::Meta& meta, const isa::Bundle& b, const LoadedModel& vision,
                         const std::vector<HostAsset>& assets, const std::string& where);

}  // namespace qbc::mxq
