// spinR1: rotate the residual stream by an orthogonal R (hidden×hidden), quant.md §3.2.
//   host embedding   E ← E·R                  (the host embeds tokens into x·R)
//   stream readers   W ← W·R                  (q/k/v/gate/up/qkv/gate_up/lm_head: (xR)(WR)ᵀ = xWᵀ)
//   stream writers   W ← Rᵀ·W, b ← Rᵀ·b       (o/down: their output lands in the rotated stream)
// The stream is found by a closure over the graph rather than by names: starting at
// `inputs_embeds`, a value is rotated when it is an add/scale/unit-gain rms_norm of rotated
// values, or an operand of such a node that is rotated (backwards through adds). Every
// node touching a rotated value must commute with R: add, scalar scale, rms_norm with
// unit gain over the whole hidden dim (RMS(xR) = RMS(x)), or a linear that absorbs R.
// Host inputs added into the stream (Qwen3-VL's `deepstack.J`) are rows the host gives in the
// rotated basis, like inputs_embeds. Anything else (a norm gain, Gemma's post-norms, a graph
// output) is refused with kFailedPrecondition naming the first such node. R is the seeded random
// Hadamard of qbc/quant/hadamard.h (Rotation in transform_util.h). Computed in fp64, written as
// fp32 once.
#include <deque>
#include <map>
#include <set>
#include <sstream>
#include <string_view>

#include "qbc/ir/host_inputs.h"
#include "qbc/quant/transforms.h"
#include "transform_util.h"

namespace qbc::quant {
namespace {

class SpinR1 final : public Pass {
 public:
  explicit SpinR1(uint64_t seed) : seed_(seed) {}
  std::string name() const override { return "spinR1"; }

  StatusOr<bool> run(PassContext& ctx) override {
    const ir::Graph& g = *ctx.graph;
    const auto users = consumers(g);
    const size_t count = g.nodes().size();

    // The host embedding table and the input it feeds.
    const ir::Weight* embed = nullptr;
    for (const auto& [name, w] : g.weights()) {
      if (w.role == ir::WeightRole::kHostEmbedding) embed = &w;
    }
    if (embed == nullptr || embed->type.rank() != 2) {
      return failed_precondition("the graph has no host embedding table [vocab, hidden] to rotate");
    }
    const int64_t hidden = embed->type.dims[1];
    const ir::ValueId embeds_in = g.find("inputs_embeds");
    if (embeds_in < 0 || g.node(embeds_in).op != ir::Op::kInput) {
      return failed_precondition("the graph has no 'inputs_embeds' input");
    }

    // Closure of the rotated values; the first problem per node, reported in graph order.
    std::vector<char> rotated(count, 0);
    std::deque<ir::ValueId> work;
    std::set<ir::ValueId> readers, writers;
    std::map<ir::ValueId, std::string> problems;
    auto problem = [&](ir::ValueId id, std::string msg) { problems.emplace(id, std::move(msg)); };
    auto mark = [&](ir::ValueId v) {
      if (!rotated[static_cast<size_t>(v)]) {
        rotated[static_cast<size_t>(v)] = 1;
        work.push_back(v);
      }
    };
    // Whether a norm has unit gain (w + unit_offset == 1 everywhere).
    std::map<ir::ValueId, bool> unit_cache;
    auto unit_gain = [&](ir::ValueId id) -> StatusOr<bool> {
      if (auto it = unit_cache.find(id); it != unit_cache.end()) return it->second;
      const ir::Node& n = g.node(id);
      QBC_ASSIGN_OR_RETURN(Matrix gamma, read_matrix(ctx, weight_operand(g, id, 1)));
      const double u = static_cast<double>(n.attrs.get_int("unit_offset"));
      bool unit = true;
      for (double v : gamma.v) unit = unit && v + u == 1.0;
      unit_cache[id] = unit;
      return unit;
    };
    const std::set<ir::ValueId> outputs(g.outputs().begin(), g.outputs().end());

    mark(embeds_in);
    while (!work.empty()) {
      const ir::ValueId v = work.front();
      work.pop_front();
      const ir::Node& n = g.node(v);
      if (n.type.rank() == 0 || n.type.dims.back() != hidden) {
        problem(v, cat(ir::describe(n),
                       " carries the residual stream but its last dim is not the hidden size ",
                       hidden));
        continue;
      }
      if (outputs.count(v) != 0) {
        problem(v, cat("graph output '", n.name, "' carries the rotated residual stream"));
      }
      // Producer side: v must be computable in the rotated basis.
      switch (n.op) {
        case ir::Op::kInput:
          // Qwen3-VL's DeepStack rows are host rows like inputs_embeds: the vision part writes
          // them in the rotated basis (driver/vision_part.cpp), calibration files through
          // input_transforms.
          if (v != embeds_in && !ir::is_deepstack_input(n.name))
            problem(v, cat("graph input '", n.name,
                           "' feeds the residual stream and cannot be rotated"));
          break;
        case ir::Op::kAdd:
        case ir::Op::kScale:
          for (const ir::Operand& o : n.operands) mark(o.value);
          break;
        case ir::Op::kRmsNorm: {
          QBC_ASSIGN_OR_RETURN(const bool unit, unit_gain(v));
          if (n.attrs.get_int("group") > 0 || !unit) {
            problem(v, cat("rms_norm '", n.name,
                           "' writes into the residual stream through its own gain (a post-norm, "
                           "as in Gemma): the "
                           "gain does not commute with the rotation and no linear can absorb it; "
                           "spinR1 cannot be "
                           "applied to this model"));
          } else {
            mark(n.operands[0].value);
          }
          break;
        }
        case ir::Op::kLinear:
          writers.insert(v);
          break;
        default:
          problem(v, cat(ir::describe(n),
                         " writes into the residual stream and does not commute "
                         "with the rotation"));
      }
      // Consumer side: every reader of v must accept x·R.
      for (ir::ValueId c : users[static_cast<size_t>(v)]) {
        const ir::Node& cn = g.node(c);
        switch (cn.op) {
          case ir::Op::kAdd:
          case ir::Op::kScale:
            mark(c);
            break;
          case ir::Op::kRmsNorm: {
            QBC_ASSIGN_OR_RETURN(const bool unit, unit_gain(c));
            if (cn.attrs.get_int("group") > 0) {
              problem(c,
                      cat("rms_norm '", cn.name, "' normalises the residual stream per group of ",
                          cn.attrs.get_int("group"), ", which does not commute with the rotation"));
            } else if (!unit) {
              problem(c, cat("rms_norm '", cn.name,
                             "' reads the residual stream with a non-unit gain; spinR1 needs "
                             "unit-gain norms: enable equivalentTransformation.normConv (it runs "
                             "first and folds the "
                             "gain into the following linears)"));
            } else {
              mark(c);
            }
            break;
          }
          case ir::Op::kLinear:
            readers.insert(c);
            break;
          case ir::Op::kLayerNorm:
            problem(c, cat("layer_norm '", cn.name,
                           "' reads the residual stream: its mean subtraction does not commute "
                           "with the rotation (spinR1 needs RMSNorm models)"));
            break;
          default:
            problem(c, cat(ir::describe(cn),
                           " reads the residual stream and does not commute "
                           "with the rotation"));
        }
      }
    }
    if (!problems.empty()) {
      const std::string more = problems.size() > 1 ? cat(" (and ", problems.size() - 1,
                                                         " more node(s) that cannot absorb it)")
                                                   : "";
      return failed_precondition(problems.begin()->second, more);
    }

    // Weights to rewrite: each must belong to exactly one node (no shared weights).
    std::map<std::string, int> uses;
    for (const ir::Node& n : g.nodes()) {
      for (const ir::Operand& o : n.operands) {
        if (o.is_weight()) ++uses[o.weight];
      }
    }
    std::set<ir::ValueId> linears(readers);
    linears.insert(writers.begin(), writers.end());
    for (ir::ValueId id : linears) {
      for (size_t i = 1; i < g.node(id).operands.size(); ++i) {
        const std::string w = weight_operand(g, id, i);
        if (!w.empty() && uses[w] != 1) {
          return failed_precondition("weight '", w, "' of '", g.node(id).name, "' is shared by ",
                                     uses[w], " nodes; it cannot be rotated for one of them alone");
        }
      }
    }

    QBC_ASSIGN_OR_RETURN(const Rotation r, Rotation::make(hidden, seed_));
    // E ← E·R: each row (one token's embedding) times R.
    const std::string embed_name = embed->name;
    {
      QBC_ASSIGN_OR_RETURN(Matrix e, read_matrix(ctx, embed_name));
      QBC_RETURN_IF_ERROR(r.right_multiply_rows(e.v.data(), e.rows));
      write_matrix(ctx, embed_name, e);
    }
    // Embeddings made outside the graph (calibration files) must be rotated the same way.
    if (ctx.input_transforms != nullptr) {
      ctx.input_transforms->push_back([r, hidden](std::vector<float>* x, int64_t seq) -> Status {
        if (static_cast<int64_t>(x->size()) != seq * hidden) {
          return invalid_argument("spinR1: ", x->size(), " input values are not ", seq, " rows of ",
                                  hidden);
        }
        std::vector<double> d(x->begin(), x->end());
        QBC_RETURN_IF_ERROR(r.right_multiply_rows(d.data(), seq));
        for (size_t i = 0; i < d.size(); ++i) (*x)[i] = static_cast<float>(d[i]);
        return ok_status();
      });
    }
    for (ir::ValueId id : linears) {
      const std::string node_name =
          g.node(id).name;  // copies: write_matrix edits the graph's weights
      const std::string wname = weight_operand(g, id, 1);
      const std::string bname = weight_operand(g, id, 2);
      QBC_ASSIGN_OR_RETURN(Matrix w, read_matrix(ctx, wname));
      if (readers.count(id) != 0) {
        if (w.cols != hidden) {
          return internal_error("'", node_name, "' reads the stream but its weight has ", w.cols,
                                " columns, not ", hidden);
        }
        QBC_RETURN_IF_ERROR(r.right_multiply_rows(w.v.data(), w.rows));  // W ← W·R
      }
      if (writers.count(id) != 0) {
        if (w.rows != hidden) {
          return internal_error("'", node_name, "' writes the stream but its weight has ", w.rows,
                                " rows, not ", hidden);
        }
        QBC_RETURN_IF_ERROR(r.left_multiply_transposed(&w));  // W ← Rᵀ·W
        if (!bname.empty()) {
          QBC_ASSIGN_OR_RETURN(Matrix b, read_matrix(ctx, bname));
          QBC_RETURN_IF_ERROR(r.right_multiply_rows(b.v.data(), 1));  // b ← Rᵀ·b
          write_matrix(ctx, bname, b);
        }
      }
      write_matrix(ctx, wname, w);
    }
    // The rotated values, for reports comparing them with the float model (output_basis.h).
    std::vector<std::string> names;
    for (size_t v = 0; v < count; ++v) {
      if (rotated[v]) names.push_back(g.node(static_cast<ir::ValueId>(v)).name);
    }
    record_spin_r1(*ctx.graph, seed_, hidden, names);
    return true;
  }

 private:
  template <typename... P>
  static std::string cat(const P&... p) {
    std::ostringstream os;
    (os << ... << p);
    return os.str();
  }

  uint64_t seed_;
};

}  // namespace

std::unique_ptr<Pass> make_spin_r1(uint64_t seed) { return std::make_unique<SpinR1>(seed); }

}  // namespace qbc::quant
