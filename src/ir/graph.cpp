#include "qbc/ir/graph.h"

namespace qbc::ir {

bool Node::operator==(const Node& o) const {
  return op == o.op && name == o.name && operands == o.operands && type == o.type && attrs == o.attrs &&
         origin == o.origin && block == o.block && part == o.part;
}

bool is_quantized(const Node& n) {
  return n.op == Op::kQLinear || (n.op == Op::kAttention && n.attrs.has("k_bits"));
}

ValueId Graph::append(Node n) {
  const ValueId id = static_cast<ValueId>(nodes_.size());
  by_name_.emplace(n.name, id);  // the verifier reports duplicates
  nodes_.push_back(std::move(n));
  return id;
}

ValueId Graph::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

const Weight* Graph::find_weight(const std::string& name) const {
  auto it = weights_.find(name);
  return it == weights_.end() ? nullptr : &it->second;
}

bool Graph::operator==(const Graph& o) const {
  return name_ == o.name_ && nodes_ == o.nodes_ && outputs_ == o.outputs_ && weights_ == o.weights_ &&
         source_path == o.source_path && source_format == o.source_format && files == o.files &&
         metadata == o.metadata;
}

std::string describe(const Node& n) {
  return "node '" + n.name + "' (" + std::string(op_info(n.op).name) + ")";
}

}  // namespace qbc::ir
