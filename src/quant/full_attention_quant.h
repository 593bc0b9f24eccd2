// The static Q/K/V quantization of a full_attention node (private to src/quant; quantize_rtn
// calls it): docs/numerics.md "full_attention".
#pragma once

#include "compile_options.pb.h"
#include "qbc/ir/graph.h"
#include "qbc/quant/calibrate.h"
#include "qbc/support/status.h"

namespace qbc::quant {

/// Writes k_bits, v_bits, p_bits, q_scale, k_scale, v_scale, k_offset and v_offset on
/// full_attention node `n` of `g` from the calibrated statistics of its q, k and v operands
/// (the keys after rope_table: a compile fixes the image grid, so the rotary tables and the
/// positions they rotate are the calibrated ones). `stats` null: placeholders (scales 1,
/// offsets 0) for a graph's shape. kInternal when an operand has no statistics.
Status set_full_attention_quant(ir::Node& n, const ir::Graph& g, const CalibStats* stats,
                                const config::CompileOptions& options);

}  // namespace qbc::quant
