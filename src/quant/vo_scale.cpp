// vo: per-channel scale migration from the value projection into o_proj (quant.md §3.7).
//   attention is linear in V per channel (out_c = Σ_j p_j v_jc), so V rows (and bias) / s
//   and the matching o_proj input columns · s leave the block's output unchanged.
// GQA: query head h reads KV head h / g (g = H / KV), so one s per KV channel is
// expanded over the o_proj columns of every query head of the group:
//   s_o[h·d + c] = s_v[(h / g)·d + c].
// The rule is SmoothQuant's (§4, α = 0.5) on the o_proj input X (the attention output):
//   s = max|X_c|^α / max|W_o[:, c]|^(1−α),
// both maxima over every query head of the group (they all get the same s; the weight
// maximum also over every row). Why X's statistics and not V's: the V cache is quantized
// per (KV head, channel) (numerics.md), so its codes do not change under any s; what s
// changes is the o_proj input (int8, one scale per token) and o_proj's columns. X is a
// convex combination of V rows per channel, so max|V_c| only bounds max|X_c| and can
// be far off where V changes sign (measured on stories260K block 0: V statistics made
// the o_proj input less flat, X statistics flatten it in every other block and family).
// Statistics: ctx.stats of the attention node (recorded as o_proj's input). The o_proj
// bias is on its output side and is untouched. fp64, rounded to fp32 once.
#include <algorithm>
#include <cmath>

#include "qbc/quant/transforms.h"
#include "transform_util.h"

namespace qbc::quant {
namespace {

constexpr double kAlpha = 0.5;

class VoScale final : public AttentionPass {
 public:
  std::string name() const override { return "vo"; }
  pass::ResourceSet needs() const override { return kScaleStats; }

 private:
  StatusOr<bool> run_attention(PassContext& ctx, const Users& users, ir::ValueId att,
                               const AttentionHeads& heads) override {
    const ir::Graph& g = *ctx.graph;
    const ir::Node& a = g.node(att);
    const int64_t H = heads.heads, KV = heads.kv_heads, d = heads.head_dim, group = heads.group;

    // Producer: the v projection (or v slice of a fused qkv), read only by this attention.
    const ir::ValueId v = a.operands[2].value;
    const ir::Node& vn = g.node(v);
    const auto& vu = users[static_cast<size_t>(v)];
    if (vu.size() != 1 || vu[0] != att)
      return unimplemented("'", vn.name, "' feeds more than '", a.name, "'");
    ir::ValueId vlin = v;
    int64_t voff = 0;
    if (vn.op == ir::Op::kSlice) {
      vlin = vn.operands[0].value;
      voff = vn.attrs.get_int("start");
      const int64_t vend = vn.attrs.get_int("end");
      for (ir::ValueId other : users[static_cast<size_t>(vlin)]) {
        const ir::Node& o = g.node(other);
        if (other != v && (o.op != ir::Op::kSlice ||
                           (o.attrs.get_int("start") < vend && o.attrs.get_int("end") > voff))) {
          return unimplemented("'", g.node(vlin).name, "' rows of '", vn.name,
                               "' are also read by '", o.name, "'");
        }
      }
    }
    if (g.node(vlin).op != ir::Op::kLinear)
      return unimplemented("'", vn.name, "' is not a linear or a slice of one");
    // Consumer: o_proj, the only reader of the attention output.
    const auto& au = users[static_cast<size_t>(att)];
    if (au.size() != 1 || g.node(au[0]).op != ir::Op::kLinear) {
      return unimplemented("'", a.name, "' does not feed exactly one linear");
    }
    const ir::ValueId o = au[0];

    // The o_proj input maxima per KV channel: the max over the query heads of the group.
    QBC_ASSIGN_OR_RETURN(const std::vector<float>* omax, channel_max(ctx, a.name, H * d));
    std::vector<double> xmax(static_cast<size_t>(KV * d), 0.0);
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t c = 0; c < d; ++c) {
        double& m = xmax[static_cast<size_t>((h / group) * d + c)];
        m = std::max<double>(m, (*omax)[static_cast<size_t>(h * d + c)]);
      }
    }
    const std::string oname = weight_operand(g, o, 1);
    QBC_ASSIGN_OR_RETURN(Matrix wo, read_matrix(ctx, oname));
    if (wo.cols != H * d) {
      return internal_error("'", g.node(o).name, "' has ", wo.cols, " input columns, attention '",
                            a.name, "' ", H * d);
    }
    std::vector<double> wmax(static_cast<size_t>(KV * d), 0.0);
    for (int64_t r = 0; r < wo.rows; ++r) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t c = 0; c < d; ++c) {
          double& m = wmax[static_cast<size_t>((h / group) * d + c)];
          m = std::max(m, std::fabs(wo.at(r, h * d + c)));
        }
      }
    }
    std::vector<double> s(static_cast<size_t>(KV * d));
    bool identity = true;
    for (size_t i = 0; i < s.size(); ++i) {
      s[i] = smooth_scale(xmax[i], wmax[i], kAlpha);
      identity = identity && s[i] == 1.0;
    }
    if (identity) return false;

    // V rows (and bias) / s.
    note_rebased(ctx, vlin, "vo");
    for (size_t i = 1; i < g.node(vlin).operands.size(); ++i) {
      const std::string name = weight_operand(g, vlin, i);
      QBC_ASSIGN_OR_RETURN(Matrix m, read_matrix(ctx, name));
      const bool bias = i == 2;
      for (size_t j = 0; j < s.size(); ++j) {
        const int64_t row = voff + static_cast<int64_t>(j);
        if (bias) {
          m.at(0, row) /= s[j];
        } else {
          for (int64_t c = 0; c < m.cols; ++c) m.at(row, c) /= s[j];
        }
      }
      write_matrix(ctx, name, m);
    }
    // o_proj columns · s, expanded over each group (its bias is on the output side).
    for (int64_t r = 0; r < wo.rows; ++r) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t c = 0; c < d; ++c)
          wo.at(r, h * d + c) *= s[static_cast<size_t>((h / group) * d + c)];
      }
    }
    write_matrix(ctx, oname, wo);
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_vo_scale() { return std::make_unique<VoScale>(); }

}  // namespace qbc::quant
