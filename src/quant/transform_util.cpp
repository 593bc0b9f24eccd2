#include "transform_util.h"

#include <map>

namespace qbc::quant {

StatusOr<Matrix> read_matrix(const PassContext& ctx, const std::string& name) {
  const ir::Weight* w = ctx.graph->find_weight(name);
  if (w == nullptr) return not_found("no weight '", name, "'");
  std::vector<float> f;
  QBC_RETURN_IF_ERROR(ctx.weights->read(*w, &f));
  Matrix m;
  m.rows = w->type.rank() == 2 ? w->type.dims[0] : 1;
  m.cols = w->type.dims.back();
  if (static_cast<int64_t>(f.size()) != m.rows * m.cols) {
    return data_loss("weight '", name, "' holds ", f.size(), " values, its type ", w->type.to_string(), " needs ",
                     m.rows * m.cols);
  }
  m.v.assign(f.begin(), f.end());
  return m;
}

void write_matrix(PassContext& ctx, const std::string& name, const Matrix& m) {
  std::vector<float> f(m.v.size());
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(m.v[i]);
  rewrite_weight(ctx, name, std::move(f));
}

std::vector<std::vector<ir::ValueId>> consumers(const ir::Graph& g) {
  std::vector<std::vector<ir::ValueId>> out(g.nodes().size());
  for (ir::ValueId id = 0; id < static_cast<ir::ValueId>(g.nodes().size()); ++id) {
    for (const ir::Operand& o : g.node(id).operands) {
      if (!o.is_weight()) out[static_cast<size_t>(o.value)].push_back(id);
    }
  }
  return out;
}

std::string weight_operand(const ir::Graph& g, ir::ValueId id, size_t i) {
  const ir::Node& n = g.node(id);
  if (i >= n.operands.size() || !n.operands[i].is_weight()) return "";
  return n.operands[i].weight;
}

std::vector<BlockNodes> block_nodes(const ir::Graph& g) {
  std::map<int, BlockNodes> blocks;
  static const std::pair<const char*, ir::ValueId BlockNodes::*> kNames[] = {
      {"attn_norm", &BlockNodes::attn_norm}, {"attn.q_proj", &BlockNodes::q},
      {"attn.k_proj", &BlockNodes::k},       {"attn.v_proj", &BlockNodes::v},
      {"attn.qkv_proj", &BlockNodes::qkv},   {"attn.q_norm", &BlockNodes::q_norm},
      {"attn.k_norm", &BlockNodes::k_norm},  {"attn.q_rope", &BlockNodes::q_rope},
      {"attn.k_rope", &BlockNodes::k_rope},  {"attn.sdpa", &BlockNodes::sdpa},
      {"attn.o_proj", &BlockNodes::o},       {"ffn_norm", &BlockNodes::ffn_norm},
      {"ffn.gate_proj", &BlockNodes::gate},  {"ffn.up_proj", &BlockNodes::up},
      {"ffn.gate_up_proj", &BlockNodes::gate_up}, {"ffn.act", &BlockNodes::act},
      {"ffn.down_proj", &BlockNodes::down}};
  for (ir::ValueId id = 0; id < static_cast<ir::ValueId>(g.nodes().size()); ++id) {
    const ir::Node& n = g.node(id);
    if (n.block < 0) continue;
    const std::string prefix = "blk." + std::to_string(n.block) + ".";
    if (n.name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = n.name.substr(prefix.size());
    BlockNodes& b = blocks[n.block];
    b.block = n.block;
    for (const auto& [suffix, member] : kNames) {
      if (rest == suffix) b.*member = id;
    }
  }
  std::vector<BlockNodes> out;
  for (auto& [i, b] : blocks) out.push_back(b);
  return out;
}

}  // namespace qbc::quant
