// The 8-bit host embedding in the quantized graph (bit.embedding 8; docs/numerics.md
// "8-bit embedding"): the graph keeps the float table and a metadata key asking for int8
// codes with row scales; the backend stores the codes in the MXQ, and the evaluator looks rows
// up as the runtime will, dequantized from the same codes.
#pragma once

#include <cstdint>
#include <vector>

#include "compile_options.pb.h"
#include "qbc/ir/graph.h"
#include "qbc/support/status.h"

namespace qbc::quant {

/// Writes the metadata key (numerics::kEmbeddingBitsKey) when `options` ask for an 8-bit
/// table, and removes it otherwise.
void record_embedding_bits(const config::CompileOptions& options, ir::Graph& g);

/// Whether `g` carries the key.
bool embedding_is_i8(const ir::Graph& g);

/// The table as the runtime will see it: when `g` carries the key, every row of `table`
/// ([rows, hidden]) is replaced by its dequantized codes; unchanged without the key. A value
/// that is not finite, or a key other than "8", is kInvalidArgument naming it.
Status embedding_as_i8(const ir::Graph& g, int64_t hidden, std::vector<float>* table);

}  // namespace qbc::quant
