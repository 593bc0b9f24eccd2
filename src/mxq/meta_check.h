// The metadata of an MXQ against its layout: every field of pb::Meta that restates the layout
// (the KV layers, the io specs, the modes, the target, the token ids) must say what the
// layout says. A reader that trusted either copy alone would let a file lie in the other.
#pragma once

#include <string>

#include "mxq_meta.pb.h"
#include "qbc/isa/program.h"
#include "qbc/support/status.h"

namespace qbc::mxq {

/// kDataLoss naming `where` (the metadata section) and the first field that differs from
/// `b`, the bundle decoded from the layout.
Status check_meta_against_layout(const pb::Meta& meta, const isa::Bundle& b,
                                 const std::string& where);

}  // namespace qbc::mxq
