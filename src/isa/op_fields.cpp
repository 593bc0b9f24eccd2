// The Ref and Expr fields of every op, read from the instruction table (see op_fields.h).
#include "op_fields.h"

#include <type_traits>

namespace qbc::isa {

std::vector<RefField> op_refs(const Op& op) {
  std::vector<RefField> out;
  std::visit(
      [&](const auto& o) {
        for_each_field(o, [&](const auto& f, const auto& v) {
          if constexpr (std::is_same_v<std::decay_t<decltype(v)>, Ref>) {
            out.push_back({f.spec.name, &v, f.required(o)});
          }
        });
      },
      op);
  return out;
}

std::vector<ExprField> op_exprs(const Op& op) {
  std::vector<ExprField> out;
  visit_fields(op, [&](const auto& f, const auto& v) {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, Expr>) {
      out.push_back({f.spec.name, &v});
    }
  });
  return out;
}

}  // namespace qbc::isa
