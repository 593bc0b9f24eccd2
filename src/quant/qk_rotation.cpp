// qkRotation: the rotation of Q and K that the rotary layout allows (quant.md §3.6,
// "R3" done offline where it is exact).
//
// A full head-dim rotation of Q and K does not commute with RoPE, so it would have to
// run online after RoPE (R3), which the numerics contract has no op for. What does
// commute with RoPE: on each rotary pair (i, i + rotary_dim/2) RoPE is a 2-D rotation
// by position·θ_i, and 2-D rotations commute, so rotating that pair of Q channels and
// the same pair of K channels by one angle φ before RoPE leaves every score unchanged:
//   (R_φ q)·(R_φ k) = q·k and RoPE(R_φ x) = R_φ RoPE(x).
// Channels past rotary_dim (partial rotary, Phi-3) do not rotate and are paired the same
// way, (rotary + j, rotary + j + (d − rotary)/2). So per (KV head, pair) the two rows of
// k_proj and the two rows of q_proj of every query head of the KV group (GQA) are
// mixed: a' = cos φ·a − sin φ·b, b' = sin φ·a + cos φ·b (biases too).
//
// The angle is what the pass chooses, and it is chosen for the weight quantizer: per
// (KV head, pair), φ ∈ {k·π/32 : k = 0..15} ([0, π/2) covers every distinct outcome: a
// quarter turn only swaps the rows and flips a sign) minimising the round-to-nearest
// squared error of those rows at the query/key weight bits, group size and zero points
// of the config; φ = 0 is a candidate and wins ties, so the pass never makes that error
// larger. Data-free (no calibration statistics). Rows whose per-row scale is set by one
// large weight gain the most (a pair of rows of very different size is balanced).
//
// Measured (docs/quantization.md): harmless at 8 bits, harmful at 4 — the criterion weighs
// the rows of a pair alike, while a q row's error counts in proportion to the key energy
// of its channel (stories260K's low-frequency key pairs sit far from 0 in one channel).
// The right criterion needs each pair's 2×2 q and k second moments from calibration.
//
// Left alone, with a note: QK-norm models (a per-head RMSNorm gain sits between the
// projection and RoPE and does not commute with R_φ unless the pair's gains are equal).
// All arithmetic in fp64, rounded to fp32 once.
#include <cmath>
#include <vector>

#include "qbc/quant/gptq.h"
#include "qbc/quant/quantize.h"
#include "qbc/quant/transforms.h"
#include "qbc/support/logging.h"
#include "transform_util.h"

namespace qbc::quant {
namespace {

constexpr int kAngles = 16;  // candidates k·π/(2·kAngles)

/// The channel pairs of one head: rotary pairs, then the non-rotary channels paired alike.
std::vector<std::pair<int64_t, int64_t>> channel_pairs(int64_t d, int64_t rotary) {
  std::vector<std::pair<int64_t, int64_t>> p;
  for (int64_t i = 0; i < rotary / 2; ++i) p.emplace_back(i, i + rotary / 2);
  const int64_t rest = (d - rotary) / 2;
  for (int64_t j = 0; j < rest; ++j) p.emplace_back(rotary + j, rotary + rest + j);
  return p;
}

/// The weight quantizer's settings for a linear.
GptqOptions quantizer_of(const PassContext& ctx, const ir::Node& linear, int64_t in) {
  GptqOptions o;
  o.bits = linear_bits(linear.name, false, *ctx.options).weight;
  o.group_size = weight_group(*ctx.options, in);
  o.zero_point = ctx.options->bit().weight_zero_point();
  o.num_threads = 1;
  return o;
}

/// Σ (RTN(w) − w)² over `rows` rows of `in` values (0 for 16-bit weights, which stay float).
double rtn_error(const std::vector<float>& w, int64_t rows, int64_t in, const GptqOptions& o) {
  if (o.bits >= 16) return 0;
  StatusOr<GptqResult> r = rtn_quantize(w, rows, in, o);
  if (!r.ok()) return INFINITY;
  const std::vector<float> deq = dequantize(*r);
  double e = 0;
  for (size_t k = 0; k < w.size(); ++k) {
    const double d = static_cast<double>(deq[k]) - w[k];
    e += d * d;
  }
  return e;
}

/// Rows a and b of `m` (and of bias `bias`, when not null) rotated by φ, in place.
void rotate_rows(Matrix& m, Matrix* bias, int64_t a, int64_t b, double phi) {
  const double c = std::cos(phi), s = std::sin(phi);
  for (int64_t col = 0; col < m.cols; ++col) {
    const double x = m.at(a, col), y = m.at(b, col);
    m.at(a, col) = c * x - s * y;
    m.at(b, col) = s * x + c * y;
  }
  if (bias != nullptr) {
    const double x = bias->at(0, a), y = bias->at(0, b);
    bias->at(0, a) = c * x - s * y;
    bias->at(0, b) = s * x + c * y;
  }
}

/// A linear's weight and optional bias as fp64 matrices.
struct LinearWeights {
  ir::ValueId node = -1;
  std::string weight_name, bias_name;
  Matrix w, b;
};

StatusOr<LinearWeights> read_linear(const PassContext& ctx, ir::ValueId node) {
  const ir::Graph& g = *ctx.graph;
  LinearWeights lw;
  lw.node = node;
  lw.weight_name = weight_operand(g, node, 1);
  QBC_ASSIGN_OR_RETURN(lw.w, read_matrix(ctx, lw.weight_name));
  if (g.node(node).operands.size() > 2) {
    lw.bias_name = weight_operand(g, node, 2);
    if (!lw.bias_name.empty()) {
      QBC_ASSIGN_OR_RETURN(lw.b, read_matrix(ctx, lw.bias_name));
    }
  }
  return lw;
}

class QkRotation final : public AttentionPass {
 public:
  std::string name() const override { return "qkRotation"; }

 private:
  StatusOr<bool> run_attention(PassContext& ctx, const Users& users, ir::ValueId att,
                               const AttentionHeads& heads) override {
    const ir::Graph& g = *ctx.graph;
    const ir::Node& a = g.node(att);
    const int64_t H = heads.heads, KV = heads.kv_heads, d = heads.head_dim, group = heads.group;
    if (g.node(a.operands[0].value).op != ir::Op::kRope &&
        g.node(a.operands[1].value).op != ir::Op::kRope) {
      // A NoPE layer (SmolLM3): the pass is written for the pairs RoPE rotates together.
      log("transforms")
          .info("qkRotation: '{}' left alone: q and k carry no RoPE (NoPE layer)", a.name);
      return false;
    }
    StatusOr<QkRope> rope = qk_rope(g, users, att, d);
    if (!rope.ok()) return rope.status().with_context("qkRotation");
    const ir::ValueId q_rope = rope->q_rope, k_rope = rope->k_rope;
    const int64_t rotary = rope->rotary;
    const ir::ValueId qsrc = rope->q_src, ksrc = rope->k_src;
    if (g.node(qsrc).op == ir::Op::kRmsNorm || g.node(ksrc).op == ir::Op::kRmsNorm) {
      log("transforms")
          .info(
              "qkRotation: '{}' left alone: a per-head norm gain sits between the projections and "
              "RoPE",
              a.name);
      return false;
    }
    QBC_ASSIGN_OR_RETURN(Rows qrows, producer_rows(g, users, qsrc, q_rope));
    QBC_ASSIGN_OR_RETURN(Rows krows, producer_rows(g, users, ksrc, k_rope));
    if (qrows.count != H * d || krows.count != KV * d) {
      return internal_error("qkRotation: attention '", a.name, "': projection rows ", qrows.count,
                            ", ", krows.count);
    }
    const bool fused = qrows.linear == krows.linear;
    QBC_ASSIGN_OR_RETURN(LinearWeights ql, read_linear(ctx, qrows.linear));
    LinearWeights kl_own;
    if (!fused) {
      QBC_ASSIGN_OR_RETURN(kl_own, read_linear(ctx, krows.linear));
    }
    LinearWeights& kl = fused ? ql : kl_own;
    const int64_t in = ql.w.cols;
    const GptqOptions qo = quantizer_of(ctx, g.node(qrows.linear), in);
    const GptqOptions ko = quantizer_of(ctx, g.node(krows.linear), in);

    const auto pairs = channel_pairs(d, rotary);
    bool changed = false;
    std::vector<float> qbuf, kbuf;
    for (int64_t kv = 0; kv < KV; ++kv) {
      for (const auto& [ca, cb] : pairs) {
        // The rows this (KV head, pair) rotates: 2 of K, 2 per query head of the group.
        std::vector<int64_t> qa, qb;
        for (int64_t h = kv * group; h < (kv + 1) * group; ++h) {
          qa.push_back(qrows.offset + h * d + ca);
          qb.push_back(qrows.offset + h * d + cb);
        }
        const int64_t ka = krows.offset + kv * d + ca, kb = krows.offset + kv * d + cb;
        auto error_at = [&](double phi) {
          const double c = std::cos(phi), s = std::sin(phi);
          qbuf.assign(static_cast<size_t>(2 * group * in), 0.0f);
          for (int64_t h = 0; h < group; ++h) {
            for (int64_t col = 0; col < in; ++col) {
              const double x = ql.w.at(qa[h], col), y = ql.w.at(qb[h], col);
              qbuf[static_cast<size_t>((2 * h) * in + col)] = static_cast<float>(c * x - s * y);
              qbuf[static_cast<size_t>((2 * h + 1) * in + col)] = static_cast<float>(s * x + c * y);
            }
          }
          kbuf.assign(static_cast<size_t>(2 * in), 0.0f);
          for (int64_t col = 0; col < in; ++col) {
            const double x = kl.w.at(ka, col), y = kl.w.at(kb, col);
            kbuf[static_cast<size_t>(col)] = static_cast<float>(c * x - s * y);
            kbuf[static_cast<size_t>(in + col)] = static_cast<float>(s * x + c * y);
          }
          return rtn_error(qbuf, 2 * group, in, qo) + rtn_error(kbuf, 2, in, ko);
        };
        double best_phi = 0, best = error_at(0);
        for (int k = 1; k < kAngles; ++k) {
          const double phi = k * M_PI / (2.0 * kAngles);
          const double e = error_at(phi);
          if (e < best) {
            best = e;
            best_phi = phi;
          }
        }
        if (best_phi == 0) continue;
        for (int64_t h = 0; h < group; ++h) {
          rotate_rows(ql.w, ql.bias_name.empty() ? nullptr : &ql.b, qa[h], qb[h], best_phi);
        }
        rotate_rows(kl.w, kl.bias_name.empty() ? nullptr : &kl.b, ka, kb, best_phi);
        changed = true;
      }
    }
    if (!changed) return false;
    note_rebased(ctx, qrows.linear, "qkRotation");
    note_rebased(ctx, krows.linear, "qkRotation");
    for (LinearWeights* lw : {&ql, fused ? nullptr : &kl_own}) {
      if (lw == nullptr) continue;
      write_matrix(ctx, lw->weight_name, lw->w);
      if (!lw->bias_name.empty()) write_matrix(ctx, lw->bias_name, lw->b);
    }
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_qk_rotation() { return std::make_unique<QkRotation>(); }

}  // namespace qbc::quant
