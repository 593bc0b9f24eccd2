// qk: per-channel scale migration between the query and the key (quant.md §3.7).
//   q·k = Σ_c (q_c·λ_c)(k_c/λ_c), so Q rows (and bias) ·λ and K rows (and bias) /λ
//   leave every attention score unchanged, soft-capped or not.
// Constraints that keep it exact:
//   - RoPE rotates each pair (i, i + rotary_dim/2) (HF rotate_half); diag(λ_a, λ_b)
//     commutes with every rotation only if λ_a = λ_b, so λ is tied per rotary pair
//     (channels at or beyond rotary_dim do not rotate and stay free);
//   - GQA: query head h reads KV head h / (H / KV), so λ is defined per KV head and
//     copied to the query heads of its group (the Q statistic is the group's max);
//   - QK-norm models (Qwen3): a per-head RMSNorm sits between the projection and RoPE
//     and would undo a row scale, so λ goes into the q_norm/k_norm gains instead, which
//     every head shares: λ is one d-vector, from the maxima over all heads.
//
// The rule (SmoothQuant's form, §4, with K in the place of the activation whose range is
// migrated and Q in the place of the weight that absorbs it; statistics tied as above):
//     λ_c = max|K_c|^α / max|Q_c|^(1−α),   α = 0.75,
// after which max|K_c| = (max|K_c|·max|Q_c|)^(1/4) and max|Q_c| = (max|K_c|·max|Q_c|)^(3/4).
// Why most of the range goes to Q (α = 0.75 rather than the balanced 0.5):
//   - the K cache is static: its scales are fixed at compile time for every token and
//     position, so K's channel spread is what coarser K grids (per-head static scales,
//     KV4, quant.md §10) and the fp16 keys pay for; this pass exists to flatten K;
//   - Q costs nothing extra on this NPU: Q is multiplied by the K cache scales of its
//     KV head before its per-token int8 quantization (numerics.md), and with the cache's
//     per-(head, rotary pair) scales that product q_c·s_k[c] is unchanged by any
//     pair-tied λ (the K codes are unchanged too), so Q's growth is absorbed exactly;
//   - the balanced α = 0.5 hardly flattens K in trained models, whose Q and K share
//     their outlier channels (stories260K: K max/mean 2.9–3.9 stays 2.9–3.8), while
//     α = 0.75 gives 2.0–2.3, about what QServe's SmoothAttention (λ = max|K|^0.5, Q
//     ignored) gives; unlike SmoothAttention it keeps a Q term, so channels where Q is
//     already large take less (bounded fp16 magnitudes of q·λ on the vector unit).
// Statistics: ctx.stats of the post-RoPE q and k (the attention's operands), which is
// what the cache and Q·Kᵀ quantize. All arithmetic in fp64, rounded to fp32 once.
#include <algorithm>
#include <cmath>

#include "qbc/quant/transforms.h"
#include "qbc/support/logging.h"
#include "transform_util.h"

namespace qbc::quant {
namespace {

constexpr double kAlpha = 0.75;

/// Multiplies rows [r.offset, r.offset + factor.size()) of the linear's weight and bias by factor.
Status scale_rows(PassContext& ctx, const Rows& r, const std::vector<double>& factor) {
  const ir::Graph& g = *ctx.graph;
  for (size_t i = 1; i < g.node(r.linear).operands.size(); ++i) {
    const std::string name = weight_operand(g, r.linear, i);
    QBC_ASSIGN_OR_RETURN(Matrix m, read_matrix(ctx, name));
    const bool bias = i == 2;
    for (size_t j = 0; j < factor.size(); ++j) {
      const int64_t row = r.offset + static_cast<int64_t>(j);
      if (bias) {
        m.at(0, row) *= factor[j];
      } else {
        for (int64_t c = 0; c < m.cols; ++c) m.at(row, c) *= factor[j];
      }
    }
    write_matrix(ctx, name, m);
  }
  note_rebased(ctx, r.linear, "qk");
  return ok_status();
}

/// Multiplies the effective gain (w + unit_offset) of rms_norm `node` by factor.
Status scale_gain(PassContext& ctx, ir::ValueId node, const std::vector<double>& factor) {
  const ir::Graph& g = *ctx.graph;
  const std::string name = weight_operand(g, node, 1);
  QBC_ASSIGN_OR_RETURN(Matrix m, read_matrix(ctx, name));
  if (m.v.size() != factor.size()) {
    return internal_error("norm '", g.node(node).name, "' has ", m.v.size(), " gains, the scale ",
                          factor.size());
  }
  const double u = static_cast<double>(g.node(node).attrs.get_int("unit_offset"));
  for (size_t c = 0; c < factor.size(); ++c) m.v[c] = (m.v[c] + u) * factor[c] - u;
  write_matrix(ctx, name, m);
  return ok_status();
}

/// x[i] and x[i + rotary/2] both become their max, for every rotary pair.
void tie_pairs(std::vector<double>& x, int64_t rotary) {
  for (int64_t i = 0; i < rotary / 2; ++i) {
    double& a = x[static_cast<size_t>(i)];
    double& b = x[static_cast<size_t>(i + rotary / 2)];
    a = b = std::max(a, b);
  }
}

class QkScale final : public AttentionPass {
 public:
  std::string name() const override { return "qk"; }
  pass::ResourceSet needs() const override { return kScaleStats; }

 private:
  StatusOr<bool> run_attention(PassContext& ctx, const Users& users, ir::ValueId att,
                               const AttentionHeads& heads) override {
    const ir::Graph& g = *ctx.graph;
    const ir::Node& a = g.node(att);
    const int64_t H = heads.heads, KV = heads.kv_heads, d = heads.head_dim, group = heads.group;
    if (g.node(a.operands[0].value).op != ir::Op::kRope &&
        g.node(a.operands[1].value).op != ir::Op::kRope) {
      // A NoPE layer (SmolLM3): the pass is written for the pairs RoPE rotates together.
      log("transforms").info("qk: '{}' left alone: q and k carry no RoPE (NoPE layer)", a.name);
      return false;
    }
    QBC_ASSIGN_OR_RETURN(const QkRope rope, qk_rope(g, users, att, d));
    const ir::ValueId q_rope = rope.q_rope, k_rope = rope.k_rope;
    const ir::Node& qr = g.node(q_rope);
    const ir::Node& kr = g.node(k_rope);
    const int64_t rotary = rope.rotary;
    QBC_ASSIGN_OR_RETURN(const std::vector<float>* qmax, channel_max(ctx, qr.name, H * d));
    QBC_ASSIGN_OR_RETURN(const std::vector<float>* kmax, channel_max(ctx, kr.name, KV * d));

    const ir::ValueId qsrc = rope.q_src, ksrc = rope.k_src;
    const bool qk_norm = g.node(qsrc).op == ir::Op::kRmsNorm || g.node(ksrc).op == ir::Op::kRmsNorm;
    // The Q and K statistics of each λ: per KV head (max over the query heads of the
    // group), or one vector for all heads when the scale lives in shared norm gains.
    const int64_t sets = qk_norm ? 1 : KV;
    std::vector<std::vector<double>> qs(static_cast<size_t>(sets),
                                        std::vector<double>(static_cast<size_t>(d), 0.0));
    std::vector<std::vector<double>> ks = qs;
    for (int64_t h = 0; h < H; ++h) {
      auto& q = qs[static_cast<size_t>(qk_norm ? 0 : h / group)];
      for (int64_t c = 0; c < d; ++c)
        q[static_cast<size_t>(c)] =
            std::max<double>(q[static_cast<size_t>(c)], (*qmax)[static_cast<size_t>(h * d + c)]);
    }
    for (int64_t kv = 0; kv < KV; ++kv) {
      auto& k = ks[static_cast<size_t>(qk_norm ? 0 : kv)];
      for (int64_t c = 0; c < d; ++c)
        k[static_cast<size_t>(c)] =
            std::max<double>(k[static_cast<size_t>(c)], (*kmax)[static_cast<size_t>(kv * d + c)]);
    }
    std::vector<std::vector<double>> lambda(static_cast<size_t>(sets));
    bool identity = true;
    for (int64_t s = 0; s < sets; ++s) {
      std::vector<double>& q = qs[static_cast<size_t>(s)];
      std::vector<double>& k = ks[static_cast<size_t>(s)];
      tie_pairs(q, rotary);
      tie_pairs(k, rotary);
      std::vector<double>& l = lambda[static_cast<size_t>(s)];
      l.resize(static_cast<size_t>(d));
      for (size_t c = 0; c < l.size(); ++c) {
        l[c] = smooth_scale(k[c], q[c], kAlpha);
        identity = identity && l[c] == 1.0;
      }
    }
    if (identity) return false;

    if (qk_norm) {
      const ir::Node& qn = g.node(qsrc);
      const ir::Node& kn = g.node(ksrc);
      if (qn.op != ir::Op::kRmsNorm || kn.op != ir::Op::kRmsNorm ||
          qn.attrs.get_int("group") != d || kn.attrs.get_int("group") != d) {
        return unimplemented("attention '", a.name, "': q/k norms must both be per-head (group ", d,
                             ")");
      }
      for (ir::ValueId nrm : {qsrc, ksrc}) {
        const auto& nu = users[static_cast<size_t>(nrm)];
        if (nu.size() != 1)
          return unimplemented("'", g.node(nrm).name, "' feeds more than its rope");
      }
      if (qn.operands[1].weight == kn.operands[1].weight) {
        return unimplemented("'", qn.name, "' and '", kn.name, "' share their gain weight");
      }
      std::vector<double> inv(lambda[0].size());
      for (size_t c = 0; c < inv.size(); ++c) inv[c] = 1.0 / lambda[0][c];
      QBC_RETURN_IF_ERROR(scale_gain(ctx, qsrc, lambda[0]));
      QBC_RETURN_IF_ERROR(scale_gain(ctx, ksrc, inv));
      return true;
    }

    QBC_ASSIGN_OR_RETURN(Rows qrows, producer_rows(g, users, qsrc, q_rope));
    QBC_ASSIGN_OR_RETURN(Rows krows, producer_rows(g, users, ksrc, k_rope));
    if (qrows.count != H * d || krows.count != KV * d) {
      return internal_error("attention '", a.name, "': projection rows ", qrows.count, ", ",
                            krows.count);
    }
    std::vector<double> fq(static_cast<size_t>(H * d)), fk(static_cast<size_t>(KV * d));
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t c = 0; c < d; ++c)
        fq[static_cast<size_t>(h * d + c)] =
            lambda[static_cast<size_t>(h / group)][static_cast<size_t>(c)];
    }
    for (int64_t kv = 0; kv < KV; ++kv) {
      for (int64_t c = 0; c < d; ++c)
        fk[static_cast<size_t>(kv * d + c)] =
            1.0 / lambda[static_cast<size_t>(kv)][static_cast<size_t>(c)];
    }
    if (qrows.linear == krows.linear) {
      // Fused qkv: one read-modify-write of the shared weight.
      Rows all{qrows.linear, std::min(qrows.offset, krows.offset), 0};
      const int64_t end = std::max(qrows.offset + qrows.count, krows.offset + krows.count);
      std::vector<double> f(static_cast<size_t>(end - all.offset), 1.0);
      for (size_t i = 0; i < fq.size(); ++i)
        f[static_cast<size_t>(qrows.offset - all.offset) + i] = fq[i];
      for (size_t i = 0; i < fk.size(); ++i)
        f[static_cast<size_t>(krows.offset - all.offset) + i] = fk[i];
      QBC_RETURN_IF_ERROR(scale_rows(ctx, all, f));
    } else {
      QBC_RETURN_IF_ERROR(scale_rows(ctx, qrows, fq));
      QBC_RETURN_IF_ERROR(scale_rows(ctx, krows, fk));
    }
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_qk_scale() { return std::make_unique<QkScale>(); }

}  // namespace qbc::quant
