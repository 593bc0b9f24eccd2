// normConv: fold norm gains into the linears that read the norm.
//   %n = rms_norm(%x, @g) {unit_offset = u};  %y = linear(%n, @W)
//   ==> @W := W · diag(g + u);  @g := 1 - u   (the norm now has unit gain)
// A LayerNorm's gain folds the same way (its mean subtraction is before the gain), and its
// bias b, if any, becomes b / g so that W · diag(g) · (n + b / g) = W · (g ⊙ n + b); a norm with
// a zero gain and a bias is left alone.
//   %n = layer_norm(%x, @g, @b);  %y = linear(%n, @W)  ==>  @W := W · diag(g); @b := b / g; @g := 1
// Computed in fp64, rounded to fp32 once.
#include <cmath>

#include "qbc/quant/transforms.h"
#include "transform_util.h"

namespace qbc::quant {
namespace {

class NormConv final : public Pass {
 public:
  std::string name() const override { return "normConv"; }

  StatusOr<bool> run(PassContext& ctx) override {
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
      const std::string gname = weight_operand(g, id, 1);
      QBC_ASSIGN_OR_RETURN(Matrix gamma, read_matrix(ctx, gname));
      const double u = static_cast<double>(n.attrs.get_int("unit_offset", 0));  // an int attribute
      bool unit = true;
      for (double v : gamma.v) unit = unit && v + u == 1.0;
      if (unit) continue;
      const std::string bname = layer ? weight_operand(g, id, 2) : "";
      Matrix beta;
      if (!bname.empty()) {
        QBC_ASSIGN_OR_RETURN(beta, read_matrix(ctx, bname));
        bool zero_gain = false;
        for (double v : gamma.v) zero_gain = zero_gain || v == 0.0;
        if (zero_gain) continue;
        for (size_t c = 0; c < beta.v.size(); ++c) beta.v[c] /= gamma.v[c];
      }
      for (ir::ValueId r : readers) {
        const std::string wname = weight_operand(g, r, 1);
        QBC_ASSIGN_OR_RETURN(Matrix w, read_matrix(ctx, wname));
        if (w.cols != gamma.cols) {
          return internal_error("node '", g.node(r).name, "': weight has ", w.cols,
                                " columns, norm '", n.name, "' has ", gamma.cols);
        }
        for (int64_t row = 0; row < w.rows; ++row) {
          for (int64_t c = 0; c < w.cols; ++c) w.at(row, c) *= gamma.v[static_cast<size_t>(c)] + u;
        }
        write_matrix(ctx, wname, w);
      }
      for (double& v : gamma.v) v = 1.0 - u;
      write_matrix(ctx, gname, gamma);
      if (!bname.empty()) write_matrix(ctx, bname, beta);
      changed = true;
    }
    return changed;
  }
};

}  // namespace

std::unique_ptr<Pass> make_norm_conv() { return std::make_unique<NormConv>(); }

}  // namespace qbc::quant
