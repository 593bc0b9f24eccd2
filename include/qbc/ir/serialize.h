// The MBLT protobuf form (proto/mblt.proto): full fidelity, including the
// effective compile options. Weights are never inside: see Weight::source.
#pragma once

#include <string>

#include "qbc/ir/graph.h"
#include "qbc/support/status.h"

namespace qbc::ir {

/// Current MBLT format version; readers reject newer files.
inline constexpr int kMbltFormatVersion = 1;

/// Serialises deterministically (same graph -> same bytes).
std::string to_proto_bytes(const Graph& g);
/// Parses and verifies; `label` names the source in errors. Calls route_protobuf_logs() first.
StatusOr<Graph> from_proto_bytes(const std::string& bytes, const std::string& label);
/// Sends libprotobuf's own log lines ("[libprotobuf ERROR ...] String field ... contains invalid
/// UTF-8") to qbc's debug log (-vv) instead of stderr, where they would stand next to the located
/// error the caller reports. Installs the handler once; later calls do nothing.
void route_protobuf_logs();

/// Writes `g` to `path` atomically.
Status save(const Graph& g, const std::string& path);
/// Reads and verifies an MBLT file.
StatusOr<Graph> load(const std::string& path);

}  // namespace qbc::ir
