// hessianQuant: GPTQ (docs/research/quant.md §6, arXiv 2210.17323) over a whole model,
// block by block and true-sequential.
//
// The calibration set runs through the float graph one segment (decoder block, or the
// head) at a time (BlockRunner). Inside a segment the linears are grouped by the value
// they read: all linears reading the same input form one group (q/k/v; o; gate/up;
// down; lm_head in the head segment). For each group in graph order the segment is run
// again with the current weights (the earlier groups already quantized) as far as the
// group's input (BlockRunner::run_prefix: the nodes after it are not needed yet), the group's
// input activations are accumulated into one Hessian, and every linear of the group is
// quantized with gptq_quantize() at the bits linear_bits() gives it (16: left in float),
// with the scales (and zero points) of bit.weightGroupSize / bit.weightZeroPoint. The codes go to
// ctx.fixed (quantize_rtn uses them instead of round-to-nearest) and the dequantized
// weights are written back to ctx.weights, so the next group, the next block (advance
// runs the quantized segment) and the final calibration see the quantized model.
//
// Linears whose weight another node also reads are skipped with a warning: one set of
// integers cannot be optimal for two different inputs.
//
// floatTarget (a qbc extension, include/qbc/quant/float_target.h): a second BlockRunner
// carries the float model's stream (each segment's linears read from a snapshot taken
// before any of them is quantized); for each group the float inputs X_f of every sample
// are kept until the quantized run has paired them with X_q (samples × seq × in floats),
// and each linear's float weight becomes W + W·(C − H)(H + λI)⁻¹ before GPTQ. A linear
// whose output is added to the residual stream (o_proj, down_proj) also aims at the float
// model's residual stream: it gets + E(H + λI)⁻¹ with E = (2/N) Σ (r_f − r_q) x_qᵀ, the
// drift r_f − r_q the earlier layers left in the stream it is added to, so the writer
// cancels what of that drift its inputs can predict. A group whose linears have few outputs
// for their inputs (down_proj, o_proj) takes the direct route instead (float_target_cost()
// chooses): per linear G = (2/N) Σ (W (x_f − x_q) + r_f − r_q) x_qᵀ = W (C − H) + E is
// accumulated during the quantized run and W' = W + G (H + λI)⁻¹, the same target without
// the in × in correction (for down_proj: 0.28 against 1.17 T multiply-adds at the 1B shape
// with 4096 calibration rows). Cost: one more float forward of each
// segment (its float inputs of every group are kept until their group is done: samples ×
// seq × the segment's input widths floats), on the correction route about three more in×in
// fp64 matrices (C, M and the transpose of GPTQ's factor of H + λI, which serves M's and E's
// solves), and for a writer the float residual of every sample (samples × seq × hidden floats)
// and an [out, in] matrix.
//
// hessianDtype: the Hessian is always accumulated, factorised and applied in fp64
// (HessianAccumulator, gptq_quantize), which is at least as precise as fp32 or bf16;
// the option is accepted and a note is logged. Results are deterministic: the runner
// visits samples in order and HessianAccumulator / gptq_quantize do not depend on the
// thread count.
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "qbc/quant/block_runner.h"
#include "qbc/quant/float_target.h"
#include "qbc/quant/gptq.h"
#include "qbc/quant/weight_passes.h"
#include "qbc/support/cancel.h"
#include "qbc/support/logging.h"
#include "transform_util.h"

namespace qbc::quant {
namespace {

/// One linear to quantize.
struct Target {
  ir::ValueId id = -1;
  std::string name;    ///< Node name.
  std::string weight;  ///< Its weight's name.
  int bits = 8;
};

/// Linears of one segment that read the same input value.
struct Group {
  ir::ValueId input = -1;
  std::string input_name;
  std::vector<Target> linears;
  /// floatTarget: the residual stream the group's only linear is added to (o_proj,
  /// down_proj), "" when it is not a residual writer.
  std::string residual_name;
};

/// W += d, each weight's sum in fp64 rounded to fp32 (a float-target term of W's shape).
Status add_correction(const std::vector<double>& d, std::vector<float>* W) {
  if (d.size() != W->size())
    return internal_error("the correction has ", d.size(), " values, the weight ", W->size());
  for (size_t k = 0; k < W->size(); ++k)
    (*W)[k] = static_cast<float>(static_cast<double>((*W)[k]) + d[k]);
  return ok_status();
}

const char* dtype_name(config::HessianDtype d) {
  switch (d) {
    case config::HESSIAN_DTYPE_BF16:
      return "bf16";
    case config::HESSIAN_DTYPE_FP32:
      return "fp32";
    default:
      return "fp32 (default)";
  }
}

class HessianQuant final : public Pass {
 public:
  explicit HessianQuant(config::HessianQuantConfig config) : config_(std::move(config)) {}
  std::string name() const override { return "hessianQuant"; }
  pass::ResourceSet needs() const override { return kCalibSamples | kFixedWeights; }

  StatusOr<bool> run(PassContext& ctx) override {
    const auto& attr = config_.attributes();
    GptqOptions gopt;
    gopt.group_size = 0;  // set per linear from bit.weightGroupSize
    gopt.act_order = attr.act_order();
    gopt.block_size = attr.block_size();
    gopt.perc_damp = attr.perc_damp();
    gopt.mse_clip = attr.mse_clip();
    gopt.refine_sweeps = attr.refine_sweeps();
    gopt.zero_point = ctx.options->bit().weight_zero_point();
    if (gopt.block_size < 1)
      return invalid_argument("hessianQuant: blockSize ", gopt.block_size, " is not >= 1");
    if (!(gopt.perc_damp > 0.0 && gopt.perc_damp <= 1.0)) {
      return invalid_argument("hessianQuant: percDamp ", gopt.perc_damp, " is not in (0, 1]");
    }
    log("gptq").info(
        "hessianDtype {}: Hessians are accumulated and factorised in fp64, at least as precise",
        dtype_name(config_.hessian_dtype()));

    const ir::Graph& g = *ctx.graph;
    // How many nodes read each weight (a shared weight cannot get one set of integers).
    std::map<std::string, int> weight_users;
    for (const ir::Node& n : g.nodes()) {
      std::set<std::string> here;
      for (const ir::Operand& o : n.operands) {
        if (o.is_weight()) here.insert(o.weight);
      }
      for (const std::string& w : here) ++weight_users[w];
    }

    QBC_ASSIGN_OR_RETURN(BlockRunner runner, BlockRunner::create(g, ctx.num_samples, *ctx.samples,
                                                                 ctx.session, ctx.deepstack));
    const auto users = consumers(g);

    // The groups of every segment, in graph order, before anything is rewritten.
    std::vector<std::vector<Group>> plan(runner.num_segments());
    int64_t total = 0;
    for (size_t s = 0; s < runner.num_segments(); ++s) {
      std::map<ir::ValueId, size_t> by_input;
      for (const std::string& node_name : runner.node_names(s)) {
        const ir::ValueId id = g.find(node_name);
        if (id < 0) return internal_error("hessianQuant: node '", node_name, "' not in the graph");
        const ir::Node& n = g.node(id);
        if (n.op != ir::Op::kLinear) continue;
        if (n.operands.size() < 2 || !n.operands[1].is_weight() || n.operands[0].is_weight()) {
          return unimplemented("hessianQuant: linear '", n.name,
                               "' does not read an activation and a weight");
        }
        const LinearBits bits = linear_bits(n.name, n.part == ir::Part::kHead, *ctx.options);
        if (bits.weight == 16) continue;
        const std::string& wname = n.operands[1].weight;
        if (weight_users[wname] > 1) {
          log("gptq").warn(
              "hessianQuant: skipping '{}': its weight '{}' is shared with another node", n.name,
              wname);
          continue;
        }
        const ir::Weight* w = g.find_weight(wname);
        if (w == nullptr || w->type.dims.size() != 2) {
          return unimplemented("hessianQuant: linear '", n.name, "' has no 2-D weight");
        }
        const ir::ValueId in = n.operands[0].value;
        auto it = by_input.find(in);
        if (it == by_input.end()) {
          it = by_input.emplace(in, plan[s].size()).first;
          plan[s].push_back({in, g.node(in).name, {}, {}});
        }
        plan[s][it->second].linears.push_back({id, n.name, wname, bits.weight});
        ++total;
      }
      if (!attr.float_target()) continue;
      for (Group& grp : plan[s]) {  // residual writers: a lone linear feeding an add
        if (grp.linears.size() != 1) continue;
        const auto& u = users[static_cast<size_t>(grp.linears[0].id)];
        if (u.size() != 1 || g.node(u[0]).op != ir::Op::kAdd) continue;
        const ir::Node& add = g.node(u[0]);
        for (const ir::Operand& o : add.operands) {
          if (!o.is_weight() && o.value != grp.linears[0].id)
            grp.residual_name = g.node(o.value).name;
        }
      }
    }
    if (total == 0) {
      log("gptq").info("hessianQuant: no linear to quantize");
      return false;
    }

    const ir::WeightReader reader = ctx.weights->reader();
    // floatTarget: a second runner carries the float model's stream; each segment reads
    // its linears' float weights from a snapshot taken before any of them is quantized.
    std::optional<BlockRunner> float_runner;
    if (attr.float_target()) {
      QBC_ASSIGN_OR_RETURN(BlockRunner fr, BlockRunner::create(g, ctx.num_samples, *ctx.samples,
                                                               ctx.session, ctx.deepstack));
      float_runner.emplace(std::move(fr));
    }
    std::map<std::string, std::vector<float>> float_weights;
    const ir::WeightReader float_reader = [&](const ir::Weight& w,
                                              std::vector<float>* out) -> Status {
      auto it = float_weights.find(w.name);
      if (it == float_weights.end()) return reader(w, out);
      *out = it->second;
      return ok_status();
    };
    int64_t done = 0;
    std::vector<float> act;
    std::vector<int64_t> shape;
    // floatTarget: per group of the segment and per sample, the group's input and (a residual
    // writer's) residual stream in the float model, all from one float run of the segment.
    std::vector<std::vector<std::vector<float>>> float_inputs_of, float_resid_of;
    std::vector<float> resid;
    for (size_t s = 0; s < runner.num_segments(); ++s) {
      float_weights.clear();
      if (float_runner) {
        for (const Group& grp : plan[s]) {
          for (const Target& t : grp.linears) {
            const ir::Weight* w = g.find_weight(t.weight);
            QBC_RETURN_IF_ERROR(reader(*w, &float_weights[t.weight])
                                    .with_context("hessianQuant: '", t.weight, "'"));
          }
        }
      }
      float_inputs_of.assign(plan[s].size(), std::vector<std::vector<float>>(ctx.num_samples));
      float_resid_of.assign(plan[s].size(), std::vector<std::vector<float>>(ctx.num_samples));
      if (float_runner) {
        // The float model's segment reads the snapshot, which no group changes: one run gives
        // every group's float inputs (the same values a run per group gave) and the float
        // stream's next segment (what advance would compute again).
        QBC_RETURN_IF_ERROR(float_runner->run(
            s, float_reader,
            [&](size_t sample, ref::Session& session) -> Status {
              for (size_t gi = 0; gi < plan[s].size(); ++gi) {
                const Group& grp = plan[s][gi];
                if (!grp.residual_name.empty()) {
                  QBC_RETURN_IF_ERROR(
                      session.activation(grp.residual_name, &float_resid_of[gi][sample], &shape)
                          .with_context("hessianQuant: float residual '", grp.residual_name, "'"));
                }
                QBC_RETURN_IF_ERROR(
                    session.activation(grp.input_name, &float_inputs_of[gi][sample], &shape)
                        .with_context("hessianQuant: float input '", grp.input_name, "'"));
              }
              return ok_status();
            },
            /*keep_outputs=*/true));  // the float stream's next segment: no second float run
      }
      for (size_t gi = 0; gi < plan[s].size(); ++gi) {
        const Group& grp = plan[s][gi];
        const ir::Weight* w0 = g.find_weight(grp.linears[0].weight);
        const int64_t in = w0->type.dims[1];
        auto rows_of = [&](const std::vector<float>& a) -> StatusOr<int64_t> {
          if (a.size() % static_cast<size_t>(in) != 0) {
            return internal_error("hessianQuant: activation '", grp.input_name, "' of ", a.size(),
                                  " values is not a multiple of ", in, " features");
          }
          return static_cast<int64_t>(a.size()) / in;
        };
        std::vector<std::vector<float>>& float_inputs = float_inputs_of[gi];
        std::vector<std::vector<float>>& float_resid = float_resid_of[gi];
        std::optional<HessianAccumulator> acc(std::in_place, in);
        const int64_t out0 = w0->type.dims[0];
        const bool writer = float_runner && !grp.residual_name.empty();
        // The cheaper of the two float-target routes (float_target.h): the [in, in]
        // correction M shared by the group, or per linear G = W (C − H) (+ E) accumulated
        // from the output drift (down_proj: fewer outputs than inputs).
        bool direct = false;
        if (float_runner) {
          int64_t rows = 0;
          for (const std::vector<float>& f : float_inputs)
            rows += static_cast<int64_t>(f.size()) / in;
          std::vector<int64_t> outs;
          for (const Target& t : grp.linears) outs.push_back(g.find_weight(t.weight)->type.dims[0]);
          direct = float_target_cost(in, outs, rows, writer).direct_is_cheaper();
        }
        std::optional<CrossAccumulator> cross(std::in_place, float_runner && !direct ? in : 0);
        // E = (2/N) Σ (r_f − r_q) x_qᵀ [out, in] for a residual writer (correction route).
        std::optional<CrossAccumulator> rcross(std::in_place, writer && !direct ? out0 : 0,
                                               writer && !direct ? in : 0);
        std::vector<OutputDriftAccumulator> drift_acc;  // direct route: one per linear
        if (direct) {
          drift_acc.reserve(grp.linears.size());
          for (const Target& t : grp.linears) {
            const std::vector<float>& wf = float_weights.at(t.weight);
            drift_acc.emplace_back(wf, g.find_weight(t.weight)->type.dims[0], in);
          }
        }
        // The quantized model up to this group's input (and the stream it adds to): the
        // nodes after it wait for this group's codes.
        std::vector<std::string> needed = {grp.input_name};
        if (writer) needed.push_back(grp.residual_name);
        QBC_RETURN_IF_ERROR(runner.run_prefix(
            s, needed, reader, [&](size_t sample, ref::Session& session) -> Status {
              QBC_RETURN_IF_ERROR(session.activation(grp.input_name, &act, &shape)
                                      .with_context("hessianQuant: input '", grp.input_name, "'"));
              QBC_ASSIGN_OR_RETURN(const int64_t rows, rows_of(act));
              QBC_RETURN_IF_ERROR(acc->add(act.data(), rows)
                                      .with_context("hessianQuant: sample ", sample, ", input '",
                                                    grp.input_name, "'"));
              if (!float_runner) return ok_status();
              if (float_inputs[sample].size() != act.size()) {
                return internal_error("hessianQuant: float and quantized inputs of '",
                                      grp.input_name, "' differ in size");
              }
              // A writer's drift r_f − r_q of the stream it is added to.
              std::vector<float>& drift = float_resid[sample];
              if (writer) {
                QBC_RETURN_IF_ERROR(
                    session.activation(grp.residual_name, &resid, &shape)
                        .with_context("hessianQuant: residual '", grp.residual_name, "'"));
                if (drift.size() != resid.size() ||
                    static_cast<int64_t>(resid.size()) != rows * out0) {
                  return internal_error("hessianQuant: residual '", grp.residual_name, "' has ",
                                        resid.size(), " values in the quantized model and ",
                                        drift.size(), " in the float model, expected ",
                                        rows * out0);
                }
                for (size_t k = 0; k < drift.size(); ++k) drift[k] -= resid[k];
              }
              Status st;
              if (direct) {
                for (OutputDriftAccumulator& da : drift_acc) {
                  st = da.add(float_inputs[sample].data(), act.data(),
                              writer ? drift.data() : nullptr, rows);
                  if (!st.ok()) break;
                }
              } else {
                st = cross->add(float_inputs[sample].data(), act.data(), rows);
                if (writer && st.ok()) st = rcross->add(drift.data(), act.data(), rows);
              }
              std::vector<float>().swap(float_inputs[sample]);
              std::vector<float>().swap(drift);
              return st.with_context("hessianQuant: sample ", sample, ", input '", grp.input_name,
                                     "'");
            }));
        QBC_ASSIGN_OR_RETURN(std::vector<double> H, acc->hessian());
        acc.reset();
        std::vector<double> M;  // floatTarget: W' = W + W·M for every linear of the group
        std::vector<double> R;  // floatTarget, residual writers: W' += E (H + λI)⁻¹
        std::vector<std::vector<double>> direct_delta;  // direct route: G (H + λI)⁻¹ per linear
        // One factorisation of H + λI for the group: GPTQ sweeps every linear with it and the
        // float target solves with it (the correction route still needs H itself).
        std::shared_ptr<const GptqFactor> factor;
        {
          std::vector<double> h;
          if (float_runner && !direct) {
            h = H;
          } else {
            h = std::move(H);
          }
          StatusOr<GptqFactor> f = gptq_factor(std::move(h), gopt);
          if (!f.ok()) return f.status().with_context("hessianQuant: input '", grp.input_name, "'");
          factor = std::make_shared<const GptqFactor>(std::move(f).value());
        }
        if (float_runner) {
          StatusOr<RidgeSolver> solver = RidgeSolver::from_factor(factor);
          if (!solver.ok())
            return solver.status().with_context("hessianQuant: float target of input '",
                                                grp.input_name, "'");
          if (direct) {
            for (size_t li = 0; li < grp.linears.size(); ++li) {
              QBC_ASSIGN_OR_RETURN(std::vector<double> G, drift_acc[li].drift_cross());
              const int64_t out = g.find_weight(grp.linears[li].weight)->type.dims[0];
              StatusOr<std::vector<double>> r = solver->solve(std::move(G), out);
              if (!r.ok())
                return r.status().with_context("hessianQuant: float target of '",
                                               grp.linears[li].name, "'");
              direct_delta.push_back(std::move(r).value());
            }
            drift_acc.clear();
            log("gptq").debug("{}: float target by the output drift ({} linears)", grp.input_name,
                              grp.linears.size());
          } else {
            QBC_ASSIGN_OR_RETURN(std::vector<double> C, cross->cross());
            StatusOr<std::vector<double>> m = solver->correction(H, std::move(C));
            if (!m.ok())
              return m.status().with_context("hessianQuant: float target of input '",
                                             grp.input_name, "'");
            M = std::move(m).value();
          }
          std::vector<double>().swap(H);
          if (writer && !direct) {
            QBC_ASSIGN_OR_RETURN(std::vector<double> E, rcross->cross());
            StatusOr<std::vector<double>> r = solver->solve(std::move(E), out0);
            if (!r.ok())
              return r.status().with_context("hessianQuant: residual target of '",
                                             grp.linears[0].name, "'");
            R = std::move(r).value();
            log("gptq").debug("{}: also aims at the float residual stream '{}'",
                              grp.linears[0].name, grp.residual_name);
          }
        }
        cross.reset();
        rcross.reset();
        for (size_t li = 0; li < grp.linears.size(); ++li) {
          QBC_RETURN_IF_ERROR(cancel::check("hessianQuant: node '" + grp.linears[li].name + "'"));
          const Target& t = grp.linears[li];
          QBC_ASSIGN_OR_RETURN(Matrix m, read_matrix(ctx, t.weight));
          if (m.cols != in) {
            return internal_error("hessianQuant: '", t.name, "' has ", m.cols,
                                  " inputs, its group ", in);
          }
          std::vector<float> W(m.v.begin(), m.v.end());
          std::vector<double>().swap(m.v);  // an LM head is gigabytes in fp64
          // Non-finite corrected weights are refused by gptq_quantize's input check below.
          if (direct) {
            QBC_RETURN_IF_ERROR(add_correction(direct_delta[li], &W)
                                    .with_context("hessianQuant: float target of '", t.name, "'"));
            std::vector<double>().swap(direct_delta[li]);
          } else if (float_runner) {
            StatusOr<std::vector<float>> wt = apply_float_target(W, m.rows, m.cols, M);
            if (!wt.ok())
              return wt.status().with_context("hessianQuant: float target of '", t.name, "'");
            W = std::move(wt).value();
            if (!R.empty()) {
              QBC_RETURN_IF_ERROR(add_correction(R, &W).with_context(
                  "hessianQuant: residual target of '", t.name, "'"));
            }
          }
          GptqOptions o = gopt;
          o.bits = t.bits;
          o.group_size = weight_group(*ctx.options, m.cols);  // static groups when > 0
          StatusOr<GptqResult> q = gptq_quantize(W, m.rows, m.cols, *factor, o);
          if (!q.ok()) return q.status().with_context("hessianQuant: node '", t.name, "'");
          GptqResult r = std::move(q).value();
          log("gptq").debug(
              "{}: {}-bit, proxy loss {:.6g} (sweep {:.6g}, {} codes refined), damp {:.3g} "
              "(retries {}), dead columns {}",
              t.name, t.bits, r.proxy_loss, r.sweep_proxy_loss, r.refined_codes, r.damp_fraction,
              r.damp_retries, r.dead_columns);
          if (r.damp_retries > 0) {
            log("gptq").warn(
                "hessianQuant: '{}': Hessian needed damping {:.3g} of its mean diagonal", t.name,
                r.damp_fraction);
          }
          std::vector<float> deq = dequantize(r);
          FixedWeights fw;
          fw.bits = t.bits;
          fw.codes = std::move(r.codes);
          fw.scales = std::move(r.scales);
          fw.zeros = std::move(r.zeros);
          (*ctx.fixed)[t.name] = std::move(fw);
          rewrite_weight(ctx, t.weight, std::move(deq));
          events::progress("gptq", ++done, total);
        }
      }
      QBC_RETURN_IF_ERROR(runner.advance(s, reader));
      if (float_runner) QBC_RETURN_IF_ERROR(float_runner->advance_from_last_run(s));
    }
    return true;
  }

 private:
  config::HessianQuantConfig config_;
};

}  // namespace

std::unique_ptr<Pass> make_hessian_quant(const config::HessianQuantConfig& config) {
  return std::make_unique<HessianQuant>(config);
}

}  // namespace qbc::quant
