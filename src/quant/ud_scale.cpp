// ud: per-channel scale migration from the FFN's up projection into down_proj
// (quant.md §3.7, the SmoothQuant rule of §4 on the down_proj input):
//   act(gate) ⊙ (up / s) = (act(gate) ⊙ up) / s, so up rows (and bias) / s and the
//   matching down_proj columns · s leave the FFN unchanged. Never the gate: act is not
//   linear.
//   s_c = max|x_c|^α / max|W_down[:, c]|^(1−α),  x = the down_proj input (blk.N.ffn.act),
// α = ud.smoothingFactor. Phi-3's fused gate_up_proj: the up rows are its second half
// (the "up" slice). A zero or non-finite maximum leaves the channel alone (s = 1);
// otherwise s is kept in [1e-5, 1e5]. fp64, rounded to fp32 once.
#include <algorithm>
#include <cmath>

#include "qbc/quant/transforms.h"
#include "transform_util.h"

namespace qbc::quant {
namespace {

class UdScale final : public Pass {
 public:
  explicit UdScale(double alpha) : alpha_(alpha) {}
  std::string name() const override { return "ud"; }
  pass::ResourceSet needs() const override { return kScaleStats; }

  StatusOr<bool> run(PassContext& ctx) override {
    if (!(alpha_ >= 0.0 && alpha_ <= 1.0))
      return invalid_argument("ud: smoothing factor ", alpha_, " is not in [0, 1]");
    const ir::Graph& g = *ctx.graph;
    const auto users = consumers(g);
    bool changed = false;
    for (ir::ValueId id = 0; id < static_cast<ir::ValueId>(g.nodes().size()); ++id) {
      if (g.node(id).op != ir::Op::kGatedAct) continue;
      QBC_ASSIGN_OR_RETURN(bool c, run_ffn(ctx, users, id));
      changed = changed || c;
    }
    return changed;
  }

 private:
  StatusOr<bool> run_ffn(PassContext& ctx, const std::vector<std::vector<ir::ValueId>>& users,
                         ir::ValueId act) {
    const ir::Graph& g = *ctx.graph;
    const ir::Node& an = g.node(act);
    // Consumer: down_proj, the only reader of the gated activation.
    const auto& au = users[static_cast<size_t>(act)];
    if (au.size() != 1 || g.node(au[0]).op != ir::Op::kLinear) {
      return unimplemented("'", an.name, "' does not feed exactly one linear");
    }
    const ir::ValueId down = au[0];
    // Producer: the up projection (operand 1), or the up slice of a fused gate_up.
    const ir::ValueId up = an.operands[1].value;
    const ir::Node& un = g.node(up);
    const auto& uu = users[static_cast<size_t>(up)];
    if (uu.size() != 1 || uu[0] != act)
      return unimplemented("'", un.name, "' feeds more than '", an.name, "'");
    ir::ValueId ulin = up;
    int64_t uoff = 0;
    if (un.op == ir::Op::kSlice) {
      ulin = un.operands[0].value;
      uoff = un.attrs.get_int("start");
      const int64_t uend = un.attrs.get_int("end");
      for (ir::ValueId other : users[static_cast<size_t>(ulin)]) {
        const ir::Node& o = g.node(other);
        if (other != up && (o.op != ir::Op::kSlice ||
                            (o.attrs.get_int("start") < uend && o.attrs.get_int("end") > uoff))) {
          return unimplemented("'", g.node(ulin).name, "' rows of '", un.name,
                               "' are also read by '", o.name, "'");
        }
      }
    }
    if (g.node(ulin).op != ir::Op::kLinear)
      return unimplemented("'", un.name, "' is not a linear or a slice of one");

    auto it = ctx.stats->find(an.name);
    if (it == ctx.stats->end())
      return failed_precondition("no calibration statistics for node '", an.name, "'");
    const std::vector<float>& xmax = it->second.channel_absmax;
    const std::string dname = weight_operand(g, down, 1);
    QBC_ASSIGN_OR_RETURN(Matrix wd, read_matrix(ctx, dname));
    if (static_cast<int64_t>(xmax.size()) != wd.cols || an.type.dims.back() != wd.cols) {
      return failed_precondition("calibration statistics of '", an.name, "' have ", xmax.size(),
                                 " channels, '", g.node(down).name, "' reads ", wd.cols);
    }
    std::vector<double> wmax(static_cast<size_t>(wd.cols), 0.0);
    for (int64_t r = 0; r < wd.rows; ++r) {
      for (int64_t c = 0; c < wd.cols; ++c)
        wmax[static_cast<size_t>(c)] =
            std::max(wmax[static_cast<size_t>(c)], std::fabs(wd.at(r, c)));
    }
    std::vector<double> s(wmax.size());
    bool identity = true;
    for (size_t c = 0; c < s.size(); ++c) {
      s[c] = smooth_scale(xmax[c], wmax[c], alpha_);
      identity = identity && s[c] == 1.0;
    }
    if (identity) return false;

    // up rows (and bias) / s.
    note_rebased(ctx, ulin, "ud");
    for (size_t i = 1; i < g.node(ulin).operands.size(); ++i) {
      const std::string name = weight_operand(g, ulin, i);
      QBC_ASSIGN_OR_RETURN(Matrix m, read_matrix(ctx, name));
      const bool bias = i == 2;
      for (size_t j = 0; j < s.size(); ++j) {
        const int64_t row = uoff + static_cast<int64_t>(j);
        if (bias) {
          m.at(0, row) /= s[j];
        } else {
          for (int64_t c = 0; c < m.cols; ++c) m.at(row, c) /= s[j];
        }
      }
      write_matrix(ctx, name, m);
    }
    // down columns · s (its bias is on the output side).
    for (int64_t r = 0; r < wd.rows; ++r) {
      for (int64_t c = 0; c < wd.cols; ++c) wd.at(r, c) *= s[static_cast<size_t>(c)];
    }
    write_matrix(ctx, dname, wd);
    return true;
  }

  double alpha_;
};

}  // namespace

std::unique_ptr<Pass> make_ud_scale(double alpha) { return std::make_unique<UdScale>(alpha); }

}  // namespace qbc::quant
