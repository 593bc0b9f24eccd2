// `qbc verify`: everything `qbc run` relies on in a compiled model, checked without running
// it, through the same code run loads it with: the reader's format rules and digests (and the
// metadata against the layout), the program verifier, every mode's device checks and the
// model interface NpuSession checks, and the host side of Generator (the tokenizer and chat
// template assets parsed, the tokenizer's ids against the embedding, the logits and the
// metadata). A file verify accepts, run accepts.
#pragma once

#include <string>
#include <vector>

#include "qbc/mxq/model_file.h"
#include "qbc/support/status.h"

namespace qbc::runtime {

struct VerifyReport {
  std::vector<std::string> modes;  ///< the modes checked, in file order
  bool chat_template = false;      ///< the assets carry a chat template (and it parsed)
};

/// Checks `file` (read by mxq::load_model, named `path` in errors). kDataLoss naming the file
/// and what is wrong (exit 2).
StatusOr<VerifyReport> verify_model(const mxq::LoadedModel& file, const std::string& path);

}  // namespace qbc::runtime
