// ir::verify: the numbered invariants of docs/ir.md. Deliberately independent
// of Builder: it re-derives everything it checks.
#include "qbc/ir/verifier.h"

#include <set>

#include "qbc/ir/builder.h"
#include "qbc/ir/phase_image.h"
#include "qbc/support/quote.h"

namespace qbc::ir {
namespace {

std::string at(const Node& n, ValueId id) {
  return "node " + quote_prefix(n.name) + " (#" + std::to_string(id) + ", " +
         std::string(op_info(n.op).name) +
         (n.origin.empty() ? "" : ", from " + quote_prefix(n.origin)) + ")";
}

Status check_attrs(const Node& n, ValueId id) {
  const OpInfo& info = op_info(n.op);
  for (const AttrSpec& spec : info.attrs) {
    const AttrValue* v = n.attrs.find(spec.name);
    if (!v) {
      if (spec.required) return invalid_argument("[I4] ", at(n, id), ": missing attribute '", spec.name, "'");
      continue;
    }
    if (attr_kind(*v) != spec.kind) {
      return invalid_argument("[I4] ", at(n, id), ": attribute '", spec.name, "' must be ",
                              attr_kind_name(spec.kind), ", is ", attr_kind_name(attr_kind(*v)));
    }
  }
  for (const auto& [name, value] : n.attrs.all()) {
    bool known = false;
    for (const AttrSpec& spec : info.attrs) known = known || name == spec.name;
    if (!known) return invalid_argument("[I4] ", at(n, id), ": unknown attribute ", quote_prefix(name));
  }
  return ok_status();
}

}  // namespace

Status verify(const Graph& g) {
  // I9: weights have static, positive shapes and a source tensor.
  for (const auto& [name, w] : g.weights()) {
    if (name.empty() || name != w.name) return invalid_argument("[I9] weight table entry ", quote_prefix(name), " is misnamed");
    for (int64_t d : w.type.dims) {
      if (d <= 0) return invalid_argument("[I9] weight ", quote_prefix("@" + name), " has non-static shape ", w.type.to_string());
    }
    if (w.tensor.empty()) return invalid_argument("[I9] weight ", quote_prefix("@" + name), " names no source tensor");
  }
  std::set<std::string> names;
  std::set<std::string> used_weights;
  int inputs = 0;
  for (ValueId id = 0; id < static_cast<ValueId>(g.nodes().size()); ++id) {
    const Node& n = g.node(id);
    // I1: unique, non-empty names.
    if (n.name.empty()) return invalid_argument("[I1] node #", id, " has no name");
    if (!names.insert(n.name).second) return invalid_argument("[I1] ", at(n, id), ": name used twice");
    // I2, I3: operands come earlier; weights exist and are parameters.
    for (size_t i = 0; i < n.operands.size(); ++i) {
      const Operand& o = n.operands[i];
      if (o.is_weight()) {
        const Weight* w = g.find_weight(o.weight);
        if (!w) return invalid_argument("[I3] ", at(n, id), ": operand ", i, " names unknown weight ", quote_prefix("@" + o.weight));
        if (w->role != WeightRole::kParameter) {
          return invalid_argument("[I3] ", at(n, id), ": operand ", i, " uses host-side weight ", quote_prefix("@" + o.weight));
        }
        used_weights.insert(o.weight);
      } else if (o.value < 0 || o.value >= id) {
        return invalid_argument("[I2] ", at(n, id), ": operand ", i, " is not defined before its use");
      }
    }
    if (n.op == Op::kInput) {
      ++inputs;
      if (!n.operands.empty()) return invalid_argument("[I6] ", at(n, id), ": an input takes no operands");
    }
    // I4: attributes follow the op's schema.
    QBC_RETURN_IF_ERROR(check_attrs(n, id));
    // I5: the stored type is the inferred type.
    StatusOr<TensorType> t = infer_type(g, n);
    if (!t.ok()) return t.status().with_context("[I5] ", at(n, id));
    if (*t != n.type) {
      return invalid_argument("[I5] ", at(n, id), ": stored type ", n.type.to_string(), " but operands give ",
                              t->to_string());
    }
    // I10: a second weight image (qbc/ir/phase_image.h) names parameter weights and is a
    // qlinear of the same result type as the node.
    for (const std::string& wname : second_image_weights(n)) {
      const Weight* w = g.find_weight(wname);
      if (!w || w->role != WeightRole::kParameter)
        return invalid_argument("[I10] ", at(n, id), ": its second image names unknown weight ", quote_prefix("@" + wname));
      used_weights.insert(wname);
    }
    if (n.attrs.has("phase_image")) {
      StatusOr<std::optional<ImagePhase>> phase = second_image_phase(n);
      if (!phase.ok()) return phase.status().with_context("[I10] ", at(n, id));
      StatusOr<Node> view = node_for_phase(n, **phase);
      if (!view.ok()) return view.status().with_context("[I10] ", at(n, id));
      StatusOr<TensorType> vt = infer_type(g, *view);
      if (!vt.ok()) return vt.status().with_context("[I10] ", at(n, id), ", its ", image_phase_name(**phase), " image");
      if (*vt != n.type) {
        return invalid_argument("[I10] ", at(n, id), ": its ", image_phase_name(**phase), " image gives ",
                                vt->to_string(), ", the node ", n.type.to_string());
      }
    }
    // I7: block indices.
    if (n.block < -1) return invalid_argument("[I7] ", at(n, id), ": block index ", n.block);
    if (n.part == Part::kHead && n.block != -1) {
      return invalid_argument("[I7] ", at(n, id), ": a head node belongs to no block");
    }
  }
  // I6: inputs and outputs.
  if (inputs == 0) return invalid_argument("[I6] graph ", quote_prefix(g.name()), " has no inputs");
  if (g.outputs().empty()) return invalid_argument("[I6] graph ", quote_prefix(g.name()), " has no outputs");
  for (ValueId o : g.outputs()) {
    if (o < 0 || o >= static_cast<ValueId>(g.nodes().size())) {
      return invalid_argument("[I6] graph ", quote_prefix(g.name()), " output refers to no node (id ", o, ")");
    }
  }
  // I8: no dead parameter weights.
  for (const auto& [name, w] : g.weights()) {
    if (w.role == WeightRole::kParameter && !used_weights.count(name)) {
      return invalid_argument("[I8] weight ", quote_prefix("@" + name), " is used by no node");
    }
  }
  return ok_status();
}

}  // namespace qbc::ir
