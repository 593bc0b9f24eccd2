// The MBLT text form: one declaration or node per line; prints and parses back
// to an equal graph (round trip). Grammar in docs/ir.md.
#pragma once

#include <string>

#include "qbc/ir/graph.h"
#include "qbc/support/status.h"

namespace qbc::ir {

/// Prints `g` as text.
std::string print_text(const Graph& g);

/// Parses text produced by print_text (or written by hand). Errors carry
/// "label:line:column". The result is verified.
StatusOr<Graph> parse_text(const std::string& text, const std::string& label = "<text>");

}  // namespace qbc::ir
