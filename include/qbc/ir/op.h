// The MBLT op set (generated from ops.def) and each op's static description.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "qbc/ir/attrs.h"

namespace qbc::ir {

/// Every MBLT op.
enum class Op {
#define QBC_OP(e, text, in_min, in_max) k##e,
#include "qbc/ir/ops.def"
#undef QBC_OP
};

/// Number of ops; tables derived from ops.def static_assert on it.
inline constexpr int kNumOps = 0
#define QBC_OP(e, text, in_min, in_max) +1
#include "qbc/ir/ops.def"
#undef QBC_OP
    ;

/// One declared attribute of an op.
struct AttrSpec {
  const char* name;
  AttrKind kind;
  bool required;
};

/// Static facts about an op.
struct OpInfo {
  Op op;
  std::string_view name;  ///< Text name, e.g. "rms_norm".
  int min_operands;
  int max_operands;
  std::vector<AttrSpec> attrs;
};

/// The description of `op`.
const OpInfo& op_info(Op op);
/// The op called `name` in text form, if any.
std::optional<Op> op_from_name(std::string_view name);

}  // namespace qbc::ir
