// normSmooth: SmoothQuant's activation→weight migration on norm → linears edges.
//   %n = rms_norm(%x, @g) {unit_offset = u};  %y_i = linear(%n, @W_i)
//   ==> (g + u) ← (g + u) / s;  W_i ← W_i · diag(s)   (one s shared by every reader,
//   since they all read the same activation)
//   s_j = max|X_j|^α / max_i max_r |W_i[r, j]|^(1−α),  X = %n (its calibration stats).
// A LayerNorm takes the same migration on its gain and its bias b (b ← b / s), since
// W · diag(s) · ((g ⊙ n + b) / s) = W · (g ⊙ n + b).
// Exact only when the norm output feeds linears alone, so other norms are skipped.
// fp64, rounded to fp32 once.
#include "qbc/quant/norm_smooth.h"

#include <algorithm>
#include <cmath>

#include "transform_util.h"

namespace qbc::quant {
namespace {

class NormSmooth final : public Pass {
 public:
  explicit NormSmooth(double alpha) : alpha_(alpha) {}
  std::string name() const override { return "normSmooth"; }
  pass::ResourceSet needs() const override { return kScaleStats; }

  StatusOr<bool> run(PassContext& ctx) override {
    if (!(alpha_ >= 0.0 && alpha_ <= 1.0)) {
      return invalid_argument("normSmooth: smoothing factor ", alpha_, " is not in [0, 1]");
    }
    const ir::Graph& g = *ctx.graph;
    const auto users = consumers(g);
    bool changed = false;
    for (ir::ValueId id = 0; id < static_cast<ir::ValueId>(g.nodes().size()); ++id) {
      const ir::Node& n = g.node(id);
      const bool layer = n.op == ir::Op::kLayerNorm;
      if ((n.op != ir::Op::kRmsNorm && !layer) || n.attrs.get_int("group", 0) > 0) continue;
      const std::vector<ir::ValueId>& readers = users[static_cast<size_t>(id)];
      bool only_linears = !readers.empty();
      for (ir::ValueId r : readers) only_linears = only_linears && g.node(r).op == ir::Op::kLinear;
      if (!only_linears) continue;

      auto it = ctx.stats->find(n.name);
      if (it == ctx.stats->end())
        return failed_precondition("no calibration statistics for node '", n.name, "'");
      const std::vector<float>& xmax = it->second.channel_absmax;
      const std::string gname = weight_operand(g, id, 1);
      QBC_ASSIGN_OR_RETURN(Matrix gain, read_matrix(ctx, gname));
      if (static_cast<int64_t>(xmax.size()) != gain.cols) {
        return failed_precondition("calibration statistics of '", n.name, "' have ", xmax.size(),
                                   " channels, the norm ", gain.cols);
      }
      std::vector<Matrix> ws;
      std::vector<std::string> wnames;
      std::vector<double> wmax(static_cast<size_t>(gain.cols), 0.0);
      for (ir::ValueId r : readers) {
        const std::string wname = weight_operand(g, r, 1);
        if (std::find(wnames.begin(), wnames.end(), wname) != wnames.end())
          continue;  // one weight, two readers
        QBC_ASSIGN_OR_RETURN(Matrix w, read_matrix(ctx, wname));
        if (w.cols != gain.cols) {
          return internal_error("node '", g.node(r).name, "': weight has ", w.cols,
                                " columns, norm '", n.name, "' has ", gain.cols);
        }
        for (int64_t row = 0; row < w.rows; ++row) {
          for (int64_t c = 0; c < w.cols; ++c) {
            wmax[static_cast<size_t>(c)] =
                std::max(wmax[static_cast<size_t>(c)], std::fabs(w.at(row, c)));
          }
        }
        ws.push_back(std::move(w));
        wnames.push_back(wname);
      }
      std::vector<double> s(wmax.size());
      bool identity = true;
      for (size_t c = 0; c < s.size(); ++c) {
        s[c] = smooth_scale(xmax[c], wmax[c], alpha_);
        identity = identity && s[c] == 1.0;
      }
      if (identity) continue;
      for (size_t i = 0; i < ws.size(); ++i) {
        Matrix& w = ws[i];
        for (int64_t row = 0; row < w.rows; ++row) {
          for (int64_t c = 0; c < w.cols; ++c) w.at(row, c) *= s[static_cast<size_t>(c)];
        }
        write_matrix(ctx, wnames[i], w);
      }
      const double u = static_cast<double>(n.attrs.get_int("unit_offset", 0));
      for (size_t c = 0; c < s.size(); ++c) gain.v[c] = (gain.v[c] + u) / s[c] - u;
      write_matrix(ctx, gname, gain);
      const std::string bname = layer ? weight_operand(g, id, 2) : "";
      if (!bname.empty()) {
        QBC_ASSIGN_OR_RETURN(Matrix bias, read_matrix(ctx, bname));
        for (size_t c = 0; c < s.size(); ++c) bias.v[c] /= s[c];
        write_matrix(ctx, bname, bias);
      }
      changed = true;
    }
    return changed;
  }

 private:
  double alpha_;
};

}  // namespace

std::unique_ptr<Pass> make_norm_smooth(double alpha) { return std::make_unique<NormSmooth>(alpha); }

}  // namespace qbc::quant
