// `qbc inspect` of a graph file: the summary of an MBLT (or its text form), or the memory plan
// and NPU programs the backend compiles it to. The compiled side is qbc/driver/inspect_mxq.h.
#pragma once

#include <string>

#include "qbc/driver/config_request.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// What an inspection prints, and the result event it reports.
struct Inspection {
  std::string text;        ///< what the command writes to stdout
  std::string event;       ///< the result event's name ("inspect", ...); empty: none
  std::string event_json;  ///< its payload, compact JSON
};

/// What to show of a graph file.
struct GraphInspectRequest {
  std::string path;      ///< an .mblt, or its text form .mblt.txt (the --dump-after files)
  bool json = false;     ///< the summary (or the memory plan) as JSON
  bool graph = false;    ///< also the graph in MBLT text form (the summary only)
  bool memory = false;   ///< the memory plan of the backend's compile (shapes only)
  bool program = false;  ///< the NPU programs of that compile, in text form (docs/npu.md)
  ConfigRequest config;  ///< the configuration the backend compiles with (--memory, --program)
};

/// The summary of the graph at `r.path` (architecture, inputs and outputs, ops, parameters by
/// part and dtype, provenance), or with `memory` / `program` what the backend makes of a
/// quantized .mblt for the configured target. kInvalidArgument naming the file for another
/// kind of file and, for --memory / --program, for a float graph or a file that is not an
/// .mblt; the backend's errors (kResourceExhausted when the model does not fit).
StatusOr<Inspection> inspect_graph(const GraphInspectRequest& r);

}  // namespace qbc::driver
