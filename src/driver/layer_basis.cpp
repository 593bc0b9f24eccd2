// The per-layer comparison's nodes and bases (see qbc/driver/layer_basis.h).
#include "qbc/driver/layer_basis.h"

#include <memory>

#include "qbc/quant/output_basis.h"

namespace qbc::driver {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

StatusOr<LayerSelection> select_layers(const ir::Graph& test, const ir::Graph& reference) {
  QBC_ASSIGN_OR_RETURN(quant::OutputBasis basis, quant::output_basis(test));
  LayerSelection sel;
  for (const ir::Node& n : test.nodes()) {
    const bool projection = n.op == ir::Op::kLinear || n.op == ir::Op::kQLinear;
    const bool block_out = ends_with(n.name, ".ffn.residual");
    if ((!projection && !block_out) || reference.find(n.name) < 0) continue;
    if (auto it = basis.rebased.find(n.name); it != basis.rebased.end()) {
      sel.left_out.push_back({n.name, it->second});
      continue;
    }
    LayerError e{n.name, std::string(ir::op_info(n.op).name), n.block, 0};
    e.undo_spin_r1 = basis.rotated.count(n.name) != 0;
    e.basis = e.undo_spin_r1 ? "residual, R1 undone" : "model";
    sel.nodes.push_back(std::move(e));
  }
  if (basis.spin_r1_seed) {
    auto shared = std::make_shared<quant::OutputBasis>(std::move(basis));
    sel.undo_spin_r1 = [shared](std::vector<float>* v) -> Status {
      const int64_t h = shared->hidden;
      if (h <= 0 || static_cast<int64_t>(v->size()) % h != 0)
        return invalid_argument("a rotated value of ", v->size(), " elements is not rows of ", h);
      return quant::undo_spin_r1(*shared, v->data(), static_cast<int64_t>(v->size()) / h);
    };
  }
  return sel;
}

}  // namespace qbc::driver
