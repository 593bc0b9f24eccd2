// Dependency tokens (docs/npu.md "Tokens"): computes every instruction's wait and signal
// channels from the access sets, so that the program meets V5 (conflicting accesses on
// different queues of a core are ordered) and V6 (the replay never deadlocks and every token
// count returns to zero), whatever the loops' trip counts.
//
// Within a loop body the tokens pair instructions of one iteration; a conflict carried from
// one iteration into a later one gets a per-iteration token from the last instruction of the
// source queue to the first of the target queue, primed before the loop and drained after
// it. Where no instruction of the right queue sits at such a place, a carrier is inserted: a
// DMA of zero rows (ld, st) or a zero-row elementwise scale (cmp), with node -1 and pass
// "npu-deps". Cross-core order is the backend's (barriers); the pass only ties each barrier
// to the DRAM accesses of its own core's other queues.
//
// A compiler pass, so it lives in the backend and not in isa: the runtime's closure holds the
// program, its verifier and its text form, nothing that rewrites a program
// (tools/check_layering.sh enforces it).
#pragma once

#include "qbc/isa/program.h"
#include "qbc/support/status.h"

namespace qbc::npu {

/// Replaces the wait/signal bits of every instruction of `p` (a program over `b`'s buffers,
/// usually one of b's modes) with computed ones, inserting carriers where needed (`b`
/// gains the pass name "npu-deps" if a carrier is inserted). Fails, leaving `p` unchanged,
/// when `p` does not pass V1 and V8, or when a carrier needs a buffer the core has none of.
Status assign_tokens(isa::Bundle& b, isa::Program& p, int instances = 1);

/// assign_tokens on every program of every mode of `b`.
Status assign_tokens(isa::Bundle& b);

}  // namespace qbc::npu
