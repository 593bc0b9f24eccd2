// The MBLT verifier: checks the numbered invariants of docs/ir.md. Independent
// of the code that built the graph; run after import and after every pass.
#pragma once

#include "qbc/ir/graph.h"
#include "qbc/support/status.h"

namespace qbc::ir {

/// OK, or the first violated invariant: "[I3] node 'blk.0.attn.q_proj' (#5): ...".
Status verify(const Graph& g);

}  // namespace qbc::ir
