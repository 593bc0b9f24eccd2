// The buffer references and expressions of an op, with their names, in the order of its row
// in the instruction table (qbc/isa/ops.h): the lists the verifier walks (V1: references and
// expressions well-formed; V8: expression values).
#pragma once

#include <vector>

#include "qbc/isa/program.h"

namespace qbc::isa {

/// One Ref field of an op. `required`: the op is malformed when it is invalid (buffer -1),
/// as far as the op's own fields tell (QkScores::q also depends on its attention, which the
/// verifier checks itself).
struct RefField {
  const char* name;
  const Ref* ref;
  bool required;
};

/// One Expr field of an op (Ref offsets are not listed: they belong to their RefField).
struct ExprField {
  const char* name;
  const Expr* expr;
};

/// The Ref fields of `op`, in print order (empty for loops and barriers).
std::vector<RefField> op_refs(const Op& op);

/// The Expr fields of `op`, in print order (a loop's trip count included).
std::vector<ExprField> op_exprs(const Op& op);

}  // namespace qbc::isa
