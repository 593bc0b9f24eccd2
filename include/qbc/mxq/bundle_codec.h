// isa::Bundle <-> the protobuf messages of an MXQ file (proto/mxq_meta.proto): the layout
// section (everything but code, weight bytes, the host embedding and debug names), one code
// section per mode and core, and the debug map. Decoding trusts nothing: every enum value,
// count and expression is checked, and errors name the field; the program verifier
// (isa::verify) then checks what the values mean.
#pragma once

#include <string>

#include "mxq_meta.pb.h"
#include "qbc/isa/program.h"
#include "qbc/support/status.h"

namespace qbc::mxq {

/// The layout of `b` (weights ranges are added by the writer).
pb::Layout encode_layout(const isa::Bundle& b);
/// Streams `core` of mode `mode` (prefill and decode). kInvalidArgument when the mode's
/// phases have different stream counts.
StatusOr<pb::CoreCode> encode_code(const isa::Bundle& b, size_t mode, size_t core);
pb::DebugMap encode_debug(const isa::Bundle& b);
/// One instruction in the generic form (Instr.table_op: its row index and its fields in row
/// order), which every reader accepts for every op; encode_code uses it only for ops the
/// schema has no message for (docs/mxq.md).
pb::Instr encode_table_op(const isa::Instr& in);

/// The most entries a decoded table may have (buffers, attentions, ropes, modes, streams).
inline constexpr int kMaxTableEntries = 1 << 20;

/// Fills b's target, interface, buffers, tables and modes (with empty streams, one per
/// core of ProgramDesc.cores) from `l`. `where` prefixes errors.
Status decode_layout(const pb::Layout& l, const std::string& where, isa::Bundle* b);
/// Fills stream `core` of mode `mode` of both phases (decode_layout first).
Status decode_code(const pb::CoreCode& c, size_t mode, size_t core, const std::string& where,
                   isa::Bundle* b);
/// Fills b's node and pass names; every instruction's node and pass must index them.
Status decode_debug(const pb::DebugMap& d, const std::string& where, isa::Bundle* b);

}  // namespace qbc::mxq
