#include "transform_util.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "qbc/quant/hadamard.h"
#include "qbc/support/logging.h"

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
    return data_loss("weight '", name, "' holds ", f.size(), " values, its type ",
                     w->type.to_string(), " needs ", m.rows * m.cols);
  }
  m.v.assign(f.begin(), f.end());
  return m;
}

void write_matrix(PassContext& ctx, const std::string& name, const Matrix& m) {
  std::vector<float> f(m.v.size());
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<float>(m.v[i]);
  rewrite_weight(ctx, name, std::move(f));
}

void note_rebased(PassContext& ctx, ir::ValueId id, std::string_view pass) {
  record_rebased(*ctx.graph, ctx.graph->node(id).name, std::string(pass));
}

double smooth_scale(double a, double b, double alpha) {
  if (!(a > 0) || !(b > 0) || !std::isfinite(a) || !std::isfinite(b)) return 1.0;
  return std::clamp(std::pow(a, alpha) / std::pow(b, 1.0 - alpha), 1e-5, 1e5);
}

StatusOr<const std::vector<float>*> channel_max(const PassContext& ctx, const std::string& node,
                                                int64_t channels) {
  if (ctx.stats == nullptr)
    return internal_error("no calibration statistics (needed for node '", node, "')");
  auto it = ctx.stats->find(node);
  if (it == ctx.stats->end())
    return failed_precondition("no calibration statistics for node '", node, "'");
  if (static_cast<int64_t>(it->second.channel_absmax.size()) != channels) {
    return failed_precondition("calibration statistics of '", node, "' have ",
                               it->second.channel_absmax.size(), " channels, the graph has ",
                               channels);
  }
  return &it->second.channel_absmax;
}

StatusOr<bool> AttentionPass::run(PassContext& ctx) {
  const Users users = consumers(*ctx.graph);
  bool changed = false;
  for (ir::ValueId id = 0; id < static_cast<ir::ValueId>(ctx.graph->nodes().size()); ++id) {
    if (ctx.graph->node(id).op != ir::Op::kAttention) continue;
    QBC_ASSIGN_OR_RETURN(const AttentionHeads heads, attention_heads(ctx.graph->node(id)));
    QBC_ASSIGN_OR_RETURN(bool c, run_attention(ctx, users, id, heads));
    changed = changed || c;
  }
  return changed;
}

StatusOr<AttentionHeads> attention_heads(const ir::Node& a) {
  AttentionHeads h;
  h.heads = a.attrs.get_int("num_heads");
  h.kv_heads = a.attrs.get_int("num_kv_heads");
  h.head_dim = a.attrs.get_int("head_dim");
  if (h.heads <= 0 || h.kv_heads <= 0 || h.head_dim <= 0 || h.heads % h.kv_heads != 0) {
    return invalid_argument("attention '", a.name, "': ", h.heads, " query heads, ", h.kv_heads,
                            " KV heads of ", h.head_dim);
  }
  h.group = h.heads / h.kv_heads;
  return h;
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

int warn_layer_norms(const ir::Graph& g, std::string_view what, std::string_view why) {
  int count = 0;
  std::string first;
  for (const ir::Node& n : g.nodes()) {
    if (n.op != ir::Op::kLayerNorm) continue;
    if (count++ == 0) first = n.name;
  }
  if (count > 0)
    log("transforms").warn("{}: {} layer_norm node(s), first '{}': {}", what, count, first, why);
  return count;
}

std::string weight_operand(const ir::Graph& g, ir::ValueId id, size_t i) {
  const ir::Node& n = g.node(id);
  if (i >= n.operands.size() || !n.operands[i].is_weight()) return "";
  return n.operands[i].weight;
}

std::vector<BlockNodes> block_nodes(const ir::Graph& g) {
  std::map<int, BlockNodes> blocks;
  static const std::pair<const char*, ir::ValueId BlockNodes::*> kNames[] = {
      {"attn_norm", &BlockNodes::attn_norm},
      {"attn.q_proj", &BlockNodes::q},
      {"attn.k_proj", &BlockNodes::k},
      {"attn.v_proj", &BlockNodes::v},
      {"attn.qkv_proj", &BlockNodes::qkv},
      {"attn.q_norm", &BlockNodes::q_norm},
      {"attn.k_norm", &BlockNodes::k_norm},
      {"attn.q_rope", &BlockNodes::q_rope},
      {"attn.k_rope", &BlockNodes::k_rope},
      {"attn.sdpa", &BlockNodes::sdpa},
      {"attn.o_proj", &BlockNodes::o},
      {"ffn_norm", &BlockNodes::ffn_norm},
      {"ffn.gate_proj", &BlockNodes::gate},
      {"ffn.up_proj", &BlockNodes::up},
      {"ffn.gate_up_proj", &BlockNodes::gate_up},
      {"ffn.act", &BlockNodes::act},
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

uint64_t mix_seed(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

StatusOr<Rotation> Rotation::make(int64_t n, uint64_t seed) {
  Rotation r;
  r.n_ = n;
  if (hadamard_supported(n)) {
    r.signs_ = hadamard_signs(n, seed);
    return r;
  }
  if (n <= 0 || n > kMaxDenseHadamardOrder) {
    return invalid_argument("no rotation of size ", n, ": not a Hadamard order and outside (0, ",
                            kMaxDenseHadamardOrder, "] for a dense random orthogonal matrix");
  }
  // Rows of a seeded Gaussian matrix, orthonormalised by modified Gram-Schmidt (twice).
  std::vector<double>& q = r.dense_;
  q.resize(static_cast<size_t>(n * n));
  uint64_t state = seed;
  auto uniform = [&state]() {  // (0, 1]
    state = mix_seed(state);
    return (static_cast<double>(state >> 11) + 1.0) * (1.0 / 9007199254740992.0);
  };
  for (size_t i = 0; i < q.size(); i += 2) {
    const double rad = std::sqrt(-2.0 * std::log(uniform()));
    const double ang = 6.283185307179586 * uniform();
    q[i] = rad * std::cos(ang);
    if (i + 1 < q.size()) q[i + 1] = rad * std::sin(ang);
  }
  for (int64_t i = 0; i < n; ++i) {
    double* qi = q.data() + i * n;
    for (int pass = 0; pass < 2; ++pass) {
      for (int64_t j = 0; j < i; ++j) {
        const double* qj = q.data() + j * n;
        double dot = 0;
        for (int64_t k = 0; k < n; ++k) dot += qi[k] * qj[k];
        for (int64_t k = 0; k < n; ++k) qi[k] -= dot * qj[k];
      }
    }
    double norm = 0;
    for (int64_t k = 0; k < n; ++k) norm += qi[k] * qi[k];
    norm = std::sqrt(norm);
    if (!(norm > 1e-12)) {
      return internal_error("random orthogonal matrix of size ", n, ": degenerate row ", i);
    }
    for (int64_t k = 0; k < n; ++k) qi[k] /= norm;
  }
  return r;
}

Status Rotation::right_multiply_rows(double* x, int64_t count) const {
  const int64_t n = n_;
  if (dense_.empty()) {
    // x·R = x·H·diag(s)/√n, i.e. (Hᵀ·x/√n) ⊙ s.
    QBC_RETURN_IF_ERROR(hadamard_transform(x, n, count, /*transpose=*/true));
    for (int64_t c = 0; c < count; ++c) {
      double* xc = x + c * n;
      for (int64_t j = 0; j < n; ++j) xc[j] *= static_cast<double>(signs_[static_cast<size_t>(j)]);
    }
    return ok_status();
  }
  std::vector<double> y(static_cast<size_t>(n));
  for (int64_t c = 0; c < count; ++c) {
    double* xc = x + c * n;
    std::fill(y.begin(), y.end(), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      const double xi = xc[i];
      const double* row = dense_.data() + i * n;
      for (int64_t j = 0; j < n; ++j) y[static_cast<size_t>(j)] += xi * row[j];
    }
    std::copy(y.begin(), y.end(), xc);
  }
  return ok_status();
}

Status Rotation::right_multiply_rows_by_transpose(double* x, int64_t count) const {
  const int64_t n = n_;
  if (dense_.empty()) {
    // x·Rᵀ = x·diag(s)·Hᵀ/√n: signs first, then the forward transform (X ← X·Hᵀ/√n).
    for (int64_t c = 0; c < count; ++c) {
      double* xc = x + c * n;
      for (int64_t j = 0; j < n; ++j) xc[j] *= static_cast<double>(signs_[static_cast<size_t>(j)]);
    }
    return hadamard_transform(x, n, count, /*transpose=*/false);
  }
  std::vector<double> y(static_cast<size_t>(n));
  for (int64_t c = 0; c < count; ++c) {
    double* xc = x + c * n;
    for (int64_t j = 0; j < n; ++j) {  // y_j = Σ_i x_i R[j][i]
      const double* row = dense_.data() + j * n;
      double acc = 0;
      for (int64_t i = 0; i < n; ++i) acc += xc[i] * row[i];
      y[static_cast<size_t>(j)] = acc;
    }
    std::copy(y.begin(), y.end(), xc);
  }
  return ok_status();
}

Status Rotation::left_multiply_transposed(Matrix* w) const {
  if (w->rows != n_)
    return internal_error("rotation of order ", n_, " applied to a matrix of ", w->rows, " rows");
  std::vector<double> t(w->v.size());  // Wᵀ [cols, n]
  for (int64_t i = 0; i < w->rows; ++i) {
    for (int64_t c = 0; c < w->cols; ++c) t[static_cast<size_t>(c * n_ + i)] = w->at(i, c);
  }
  QBC_RETURN_IF_ERROR(right_multiply_rows(t.data(), w->cols));
  for (int64_t i = 0; i < w->rows; ++i) {
    for (int64_t c = 0; c < w->cols; ++c) w->at(i, c) = t[static_cast<size_t>(c * n_ + i)];
  }
  return ok_status();
}

StatusOr<std::vector<double>> Rotation::matrix() const {
  std::vector<double> m(static_cast<size_t>(n_ * n_), 0.0);
  for (int64_t i = 0; i < n_; ++i) m[static_cast<size_t>(i * n_ + i)] = 1.0;
  QBC_RETURN_IF_ERROR(right_multiply_rows(m.data(), n_));
  return m;
}

StatusOr<Rows> producer_rows(const ir::Graph& g, const std::vector<std::vector<ir::ValueId>>& users,
                             ir::ValueId v, ir::ValueId reader) {
  const ir::Node& n = g.node(v);
  const auto& vu = users[static_cast<size_t>(v)];
  if (vu.size() != 1 || vu[0] != reader) {
    return unimplemented("'", n.name, "' feeds more than '", g.node(reader).name,
                         "'; its rows cannot be rewritten");
  }
  if (n.op == ir::Op::kLinear) return Rows{v, 0, n.type.dims.back()};
  if (n.op == ir::Op::kSlice && g.node(n.operands[0].value).op == ir::Op::kLinear) {
    const ir::ValueId lin = n.operands[0].value;
    const int64_t start = n.attrs.get_int("start"), end = n.attrs.get_int("end");
    for (ir::ValueId other : users[static_cast<size_t>(lin)]) {
      const ir::Node& o = g.node(other);
      if (other == v) continue;
      if (o.op != ir::Op::kSlice ||
          (o.attrs.get_int("start") < end && o.attrs.get_int("end") > start)) {
        return unimplemented("'", g.node(lin).name, "' rows [", start, ", ", end,
                             ") are also read by '", o.name, "'");
      }
    }
    return Rows{lin, start, end - start};
  }
  return unimplemented("'", n.name, "' is not a linear or a slice of one");
}

StatusOr<QkRope> qk_rope(const ir::Graph& g, const std::vector<std::vector<ir::ValueId>>& users,
                         ir::ValueId att, int64_t head_dim) {
  const ir::Node& a = g.node(att);
  QkRope r;
  r.q_rope = a.operands[0].value;
  r.k_rope = a.operands[1].value;
  const ir::Node& qr = g.node(r.q_rope);
  const ir::Node& kr = g.node(r.k_rope);
  if (qr.op != ir::Op::kRope || kr.op != ir::Op::kRope) {
    return unimplemented("attention '", a.name, "': q or k is not a rope node");
  }
  r.rotary = qr.attrs.get_int("rotary_dim");
  if (kr.attrs.get_int("rotary_dim") != r.rotary || r.rotary % 2 != 0 || r.rotary > head_dim) {
    return unimplemented("attention '", a.name, "': q and k rotary dims ", r.rotary, ", ",
                         kr.attrs.get_int("rotary_dim"), " (head_dim ", head_dim, ")");
  }
  for (ir::ValueId v : {r.q_rope, r.k_rope}) {
    const auto& u = users[static_cast<size_t>(v)];
    if (u.size() != 1 || u[0] != att)
      return unimplemented("'", g.node(v).name, "' feeds more than '", a.name, "'");
  }
  r.q_src = qr.operands[0].value;
  r.k_src = kr.operands[0].value;
  return r;
}

const BlockNodes* block_among(const ir::Graph& g, const std::vector<BlockNodes>& blocks,
                              const std::vector<std::string>& names) {
  const std::set<std::string> here(names.begin(), names.end());
  const BlockNodes* b = nullptr;
  for (const BlockNodes& cand : blocks) {
    for (ir::ValueId id : {cand.attn_norm, cand.q, cand.qkv, cand.o, cand.down}) {
      if (id >= 0 && here.count(g.node(id).name)) b = &cand;
    }
  }
  return b;
}

}  // namespace qbc::quant
