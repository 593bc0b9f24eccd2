// The NPU program text form read back (docs/npu.md "Text form"): what print_bundle writes
// parses to a bundle that prints to the same text. The text carries no weight image and no
// embedding table (both are zero-filled at the printed sizes, so the bundle passes the
// verifier), no cluster count and no weight block numbers; MBLT node and pass names are numbered in
// the order they first appear, with unnamed placeholders up to the printed counts.
#pragma once

#include <string>

#include "qbc/isa/program.h"
#include "qbc/support/status.h"

namespace qbc::isa {

/// Parses the text of print_bundle (with its tables; debug notes and tokens optional).
/// Errors are kInvalidArgument "label:line:column: what (found 'token')".
StatusOr<Bundle> parse_bundle(const std::string& text, const std::string& label = "<text>");

}  // namespace qbc::isa
