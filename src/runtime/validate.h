// The checks Device::create makes so that running a bundle can never touch memory outside
// the simulated device or evaluate an undefined expression, whatever the bundle holds
// (bundles come from files). They are not the program verifier (isa::verify, which checks
// ordering, liveness and the other invariants of docs/npu.md); ranges that depend on
// runtime values are checked again at every instruction.
#pragma once

#include <cstdint>

#include "qbc/isa/program.h"
#include "qbc/support/status.h"

namespace qbc::runtime {

/// What create() needs to know about a checked bundle.
struct BundleLayout {
  int64_t dram_size = 0;             ///< highest DRAM end of any buffer (every slot) or the image
  int32_t loop_vars[3] = {0, 0, 0};  ///< loop variables of the prefill, decode and span programs
};

/// Checks `b` for running mode `m` (an element of b.modes) and returns its layout.
StatusOr<BundleLayout> validate_bundle(const isa::Bundle& b, const isa::Mode& m);

}  // namespace qbc::runtime
