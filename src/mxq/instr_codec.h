// One instruction <-> its MXQ message (pb::Instr), read from the instruction table
// (qbc/isa/ops.h): field i of an op's row is field number i + 1 of its message, and op k of
// isa::Op is field number k + 1 of Instr's oneof. An op appended to the table after the last
// one with a message of its own travels as a TableOp (its row index and its fields in row
// order), so adding an instruction does not touch the schema; a reader accepts a TableOp
// for every op it knows.
#pragma once

#include <string>

#include "mxq_meta.pb.h"
#include "qbc/isa/program.h"
#include "qbc/support/status.h"

namespace qbc::mxq {

/// Decoding context: the location prefix and the first error.
struct Reader {
  std::string where;
  Status status;
  bool fail(const std::string& field, const std::string& what);
  template <typename E>
  bool en(uint32_t v, uint32_t count, const char* field, E* out) {
    if (v >= count) return fail(field, "enum value " + std::to_string(v) + " is not defined");
    *out = static_cast<E>(v);
    return true;
  }
  bool expr(const pb::Expr& e, const std::string& field, isa::Expr* out);
  bool ref(const pb::Ref& r, const std::string& field, isa::Ref* out);
};

/// With `as_table_op` the op is written as a TableOp even when it has a message of its own
/// (a form every reader accepts for every op; the writer uses it only for ops without one).
void encode_instr(const isa::Instr& in, pb::Instr* out, bool as_table_op = false);
/// Fills `out` from `p`, or records the first fault in `r` and returns false.
bool decode_instr(const pb::Instr& p, Reader& r, isa::Instr* out);

/// The number of ops of isa::Op that have a message of their own in Instr's oneof.
int ops_with_own_message();

}  // namespace qbc::mxq
