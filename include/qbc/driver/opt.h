// `qbc opt`: named passes of either stage run on a text file, the result printed as text
// (docs/testing.md "Golden tests"). MBLT text goes through quant passes (over weights the
// text cannot carry: deterministic values from each weight's name) and then backend passes
// (shapes only: no weight image); NPU program text through the passes that work on programs
// alone (assign-tokens), or none (a parse and print); plan text (npu::print_plan) is parsed,
// verified (P1..P9) and printed back.
#pragma once

#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/support/status.h"

namespace qbc::driver {

enum class TextKind { kAuto, kMblt, kProgram, kPlan };

/// What `qbc opt` runs.
struct OptRequest {
  std::string label;  ///< the input's name in errors ("file.mblt")
  std::string text;
  TextKind kind = TextKind::kAuto;  ///< kAuto: "bundle ..." program, "plan of graph ..." plan
  std::vector<std::string> passes;  ///< quant passes first, then backend passes
  config::ResolvedConfig cfg;       ///< quant pass options and the backend's target
};

/// A pass `qbc opt` can run.
struct OptPass {
  std::string name;
  std::string stage;  ///< "quant" or "npu"
  std::string summary;
  std::string input;  ///< "mblt" or "mblt, program"
};

/// Every pass of both registries, quant first, each sorted by name.
std::vector<OptPass> opt_passes();

/// The kind of `text` (kAuto resolved).
TextKind detect_kind(const std::string& text);

/// Runs the request. Errors: bad text kInvalidArgument "label:line:col: ..."; an unknown
/// pass, or one that cannot run on the input kind, kUnimplemented naming it; a quant pass
/// after a backend pass kInvalidArgument.
StatusOr<std::string> run_opt(const OptRequest& request);

}  // namespace qbc::driver
