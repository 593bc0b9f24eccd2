// Loading a compiled model for the runtime: an MXQ file or a split build's manifest read by
// qbc_mxq (every format rule and digest checked), the program verifier run on what it holds,
// and a simulated device created for the chosen core mode. The runtime knows only the file.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "qbc/mxq/model_file.h"
#include "qbc/runtime/device.h"
#include "qbc/support/status.h"

namespace qbc::runtime {

struct LoadOptions {
  /// The mode to run: "auto" (the file's only mode; an error naming the modes when it has
  /// several), "single", "multi", "global4" or "global8".
  std::string core_mode = "auto";
  /// Host threads of the device (0 = all); results do not depend on it.
  int host_threads = 0;
  /// Verify section digests (`--no-verify` clears it; the format rules are always checked).
  bool verify_digests = true;
  /// The physical cores to run on, as "cluster:core" (e.g. "0:1"); empty: the first cores
  /// of the device. single: one core per sequence slot, in slot order (slots past the list
  /// are refused); multi and global4: the four cores of one cluster; global8: all eight.
  /// On the CPU executor the choice changes no result, only where the counters are kept.
  std::vector<std::string> cores;
};

/// A loaded model: the file's contents and a device running one of its modes. The weights
/// live once, in the device's DRAM: `file.bundle->image` is released once the device exists,
/// and the file's mapped pages are let go after decoding.
struct Model {
  mxq::LoadedModel file;
  std::shared_ptr<Device> device;
};

/// The values `core_mode` accepts: "auto", then every scheme of the table (isa/schemes.def).
std::vector<std::string> core_modes();

/// The scheme for `core_mode` among the modes of `bundle`: kInvalidArgument naming the
/// modes the file has when it is not there, or when "auto" is ambiguous.
StatusOr<isa::Scheme> pick_mode(const isa::Bundle& bundle, const std::string& core_mode,
                                const std::string& path);

/// The physical core of every logical core (slot * cores_per_instance + index) of `mode`
/// for the "cluster:core" list `cores` (kInvalidArgument naming the entry and the rule it
/// breaks); empty `cores`: the identity.
StatusOr<std::vector<int32_t>> place_cores(const isa::Bundle& bundle, const isa::Mode& mode,
                                           const std::vector<std::string>& cores);

/// Loads `path` (an .mxq or a manifest). Errors name the file and section (exit 2).
StatusOr<Model> load_model(const std::string& path, const LoadOptions& options = {});

}  // namespace qbc::runtime
