// spinR1Check (equivalentTransformation.spinR1.policy ifBetter): does rotating the
// residual stream make this model's weights easier to quantize? Measured before normConv
// and spinR1 run, on the float model and calibration rows (docs/quantization.md).
//
// For every linear the two passes would change, the relative output error of its
// round-to-nearest weights (the configured bits, groups and zero points; the MSE clip
// when hessianQuant will clip) on calibration inputs,
//   e = ‖X (Q(W) − W)ᵀ‖² / ‖X Wᵀ‖²,
// is computed twice:
//   plain    as the model is:      readers (q/k/v, gate/up) see y = γ'⊙x̂ and keep W;
//                                  writers (o, down) keep W;
//   rotated  after normConv+spinR1: readers see x̂·R and hold W·diag(γ')·R;
//                                  writers hold Rᵀ·W (their inputs do not change).
// x̂ = x / √(mean(x²) + eps) is the norm's unit-gain output, γ' = γ + unit_offset, R the
// rotation spinR1 will use (same seed). The rotation is kept when the mean of e over
// these linears is lower rotated. The head (and the final norm) is left out of the
// measure: it is one linear of many, at the head's bits, and costs the most to score.
// Calibration rows: kRows tokens per block input, spread over the first kSamples samples;
// each linear is scored on at most kOutRows of its output rows (evenly spaced).
#include <algorithm>
#include <cmath>

#include "gptq_linalg.h"
#include "output_error.h"
#include "qbc/quant/block_runner.h"
#include "qbc/quant/gptq.h"
#include "qbc/quant/quantize.h"
#include "qbc/quant/transforms.h"
#include "qbc/support/logging.h"
#include "transform_util.h"

namespace qbc::quant {
namespace {

constexpr int64_t kRows = 256;     // calibration tokens scored per block input
constexpr size_t kSamples = 16;    // calibration samples run (the first ones)
constexpr int64_t kOutRows = 256;  // output rows scored per linear

/// Up to `keep` tokens of one activation [seq, cols], evenly spaced and shifted per
/// sample so that the same positions are not always taken, appended as fp64 rows.
void take_rows(const std::vector<float>& act, int64_t cols, size_t sample, int64_t keep,
               std::vector<double>* x) {
  const int64_t seq = static_cast<int64_t>(act.size()) / cols;
  keep = std::min(keep, seq);
  if (keep <= 0) return;
  const int64_t stride = seq / keep;
  const int64_t shift = stride > 1 ? static_cast<int64_t>(sample * 37) % stride : 0;
  for (int64_t k = 0; k < keep; ++k) {
    const int64_t t = k * stride + shift;
    x->insert(x->end(), act.begin() + t * cols, act.begin() + (t + 1) * cols);
  }
}

/// Σ_r ‖X·m_r‖² over the rows m_r of M [rows, in], a chunk of rows per work item,
/// summed in row order.
double total_error(const OutputError& err, const std::vector<double>& M, int64_t rows,
                   int threads) {
  const int64_t in = err.cols();
  std::vector<double> per(static_cast<size_t>(rows));
  gptq_detail::parallel_chunks(rows, 16, threads, [&](int64_t a, int64_t b) {
    err.errors(M.data() + a * in, b - a, per.data() + a);
  });
  double sum = 0;
  for (double v : per) sum += v;
  return sum;
}

/// The relative output error e of the header for weight `w` on the inputs of `err`,
/// scored on at most kOutRows evenly spaced rows of w (rows quantize independently, so
/// this is the error of those outputs exactly).
StatusOr<double> relative_error(const OutputError& err, const Matrix& w, const GptqOptions& o,
                                int threads) {
  const int64_t rows = std::min(w.rows, kOutRows), in = w.cols;
  std::vector<float> wf(static_cast<size_t>(rows * in));
  std::vector<double> wd(wf.size());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t src = (r * w.rows) / rows;
    for (int64_t c = 0; c < in; ++c) {
      wf[r * in + c] = static_cast<float>(w.at(src, c));
      wd[r * in + c] = wf[r * in + c];
    }
  }
  QBC_ASSIGN_OR_RETURN(const GptqResult q, rtn_quantize(wf, rows, in, o));
  const std::vector<float> deq = dequantize(q);
  std::vector<double> d(wf.size());
  for (size_t k = 0; k < d.size(); ++k) d[k] = static_cast<double>(deq[k]) - wd[k];
  const double energy = total_error(err, wd, rows, threads);
  if (!(energy > 0)) return 0.0;
  return total_error(err, d, rows, threads) / energy;
}

class RotationCheck final : public Pass {
 public:
  explicit RotationCheck(uint64_t seed) : seed_(seed) {}
  std::string name() const override { return "spinR1Check"; }
  pass::ResourceSet needs() const override { return kCalibSamples; }
  pass::ResourceSet provides() const override { return kRotationVerdict; }

  StatusOr<bool> run(PassContext& ctx) override {
    const ir::Graph& g = *ctx.graph;
    // LayerNorm models (Cohere2): the mean subtraction does not commute with a rotation of the
    // residual stream, so neither normConv's fold nor spinR1 keeps the function.
    if (warn_layer_norms(g, "spinR1 policy ifBetter",
                         "normConv and spinR1 are skipped (a LayerNorm's mean subtraction does "
                         "not commute with a rotation of the residual stream)") > 0) {
      ctx.rotation.decided = true;
      ctx.rotation.rotate = false;
      return false;
    }
    const int threads = gptq_detail::resolve_threads(ctx.session.threads);
    const std::vector<BlockNodes> blocks = block_nodes(g);
    const size_t samples = std::min<size_t>(ctx.num_samples, kSamples);
    QBC_ASSIGN_OR_RETURN(BlockRunner runner,
                         BlockRunner::create(g, samples, *ctx.samples, ctx.session, ctx.deepstack));
    const ir::WeightReader reader = ctx.weights->reader();
    const int64_t per_sample = std::max<int64_t>(1, kRows / static_cast<int64_t>(samples));
    std::unique_ptr<Rotation> rot;
    double plain = 0, rotated = 0;
    int64_t linears = 0;

    for (size_t s = 0; s < runner.num_segments(); ++s) {
      const BlockNodes* b = block_among(g, blocks, runner.node_names(s));
      if (b == nullptr || b->attn_norm < 0) {
        if (s + 1 < runner.num_segments()) QBC_RETURN_IF_ERROR(runner.advance(s, reader));
        continue;
      }
      // The block's norms with their readers, and its writers.
      struct Norm {
        ir::ValueId node;
        std::vector<ir::ValueId> readers;
      };
      std::vector<Norm> norms;
      auto add_norm = [&](ir::ValueId norm, std::initializer_list<ir::ValueId> rs) {
        Norm nm{norm, {}};
        for (ir::ValueId r : rs) {
          if (r >= 0) nm.readers.push_back(r);
        }
        if (norm >= 0 && !nm.readers.empty()) norms.push_back(std::move(nm));
      };
      add_norm(b->attn_norm, {b->q, b->k, b->v, b->qkv});
      add_norm(b->ffn_norm, {b->gate, b->up, b->gate_up});
      std::vector<ir::ValueId> writers;
      for (ir::ValueId w : {b->o, b->down}) {
        if (w >= 0) writers.push_back(w);
      }
      // Inputs: each norm's input (the residual stream) and each writer's input.
      std::map<ir::ValueId, std::vector<double>> rows;
      for (const Norm& nm : norms) rows[g.node(nm.node).operands[0].value];
      for (ir::ValueId w : writers) rows[g.node(w).operands[0].value];
      std::map<ir::ValueId, int64_t> widths;
      std::vector<float> act;
      std::vector<int64_t> shape;
      QBC_RETURN_IF_ERROR(runner.run(
          s, reader,
          [&](size_t sample, ref::Session& session) -> Status {
            for (auto& [id, x] : rows) {
              QBC_RETURN_IF_ERROR(session.activation(g.node(id).name, &act, &shape));
              const int64_t cols = shape.empty() ? 1 : shape.back();
              widths[id] = cols;
              take_rows(act, cols, sample, per_sample, &x);
            }
            return ok_status();
          },
          /*keep_outputs=*/true));

      auto score = [&](const std::string& node, const OutputError& xp, const OutputError& xr,
                       const Matrix& wp, const Matrix& wr) -> Status {
        const GptqOptions o = quantizer(ctx, node, wp.cols);
        if (o.bits >= 16) return ok_status();
        QBC_ASSIGN_OR_RETURN(const double ep, relative_error(xp, wp, o, threads));
        QBC_ASSIGN_OR_RETURN(const double er, relative_error(xr, wr, o, threads));
        log("quantize")
            .debug("spinR1Check: '{}': relative output error {:.6g} plain, {:.6g} rotated", node,
                   ep, er);
        plain += ep;
        rotated += er;
        ++linears;
        return ok_status();
      };

      for (const Norm& nm : norms) {
        const ir::Node& norm = g.node(nm.node);
        const ir::ValueId in_id = norm.operands[0].value;
        const int64_t hidden = widths[in_id];
        if (!rot) {
          QBC_ASSIGN_OR_RETURN(Rotation r, Rotation::make(hidden, seed_));
          rot = std::make_unique<Rotation>(std::move(r));
        }
        if (rot->size() != hidden)
          return internal_error("spinR1Check: norm '", norm.name, "' is ", hidden, " wide");
        QBC_ASSIGN_OR_RETURN(Matrix gamma, read_matrix(ctx, weight_operand(g, nm.node, 1)));
        if (gamma.cols * gamma.rows != hidden) {
          return failed_precondition("spinR1Check: norm '", norm.name, "' has ",
                                     gamma.cols * gamma.rows, " gains for ", hidden, " channels");
        }
        const double u = static_cast<double>(norm.attrs.get_int("unit_offset"));
        const double eps = norm.attrs.get_float("eps");
        std::vector<double> y = std::move(rows[in_id]);  // becomes γ'⊙x̂
        const int64_t n = static_cast<int64_t>(y.size()) / hidden;
        std::vector<double> xr(y.size());  // x̂·R
        for (int64_t t = 0; t < n; ++t) {
          double ms = 0;
          for (int64_t c = 0; c < hidden; ++c) ms += y[t * hidden + c] * y[t * hidden + c];
          const double inv = 1.0 / std::sqrt(ms / static_cast<double>(hidden) + eps);
          for (int64_t c = 0; c < hidden; ++c) {
            xr[t * hidden + c] = y[t * hidden + c] * inv;
            y[t * hidden + c] = xr[t * hidden + c] * (gamma.v[c] + u);
          }
        }
        QBC_RETURN_IF_ERROR(rot->right_multiply_rows(xr.data(), n));
        const OutputError plain_in(std::move(y), n, hidden, threads),
            rotated_in(std::move(xr), n, hidden, threads);
        for (ir::ValueId r : nm.readers) {
          QBC_ASSIGN_OR_RETURN(Matrix w, read_matrix(ctx, weight_operand(g, r, 1)));
          if (w.cols != hidden)
            return internal_error("spinR1Check: '", g.node(r).name, "' reads ", w.cols,
                                  " features");
          Matrix wr = w;  // W·diag(γ')·R
          for (int64_t i = 0; i < wr.rows; ++i) {
            for (int64_t c = 0; c < hidden; ++c) wr.at(i, c) *= gamma.v[c] + u;
          }
          QBC_RETURN_IF_ERROR(rot->right_multiply_rows(wr.v.data(), wr.rows));
          QBC_RETURN_IF_ERROR(score(g.node(r).name, plain_in, rotated_in, w, wr));
        }
      }
      for (ir::ValueId wid : writers) {
        std::vector<double>& x = rows[g.node(wid).operands[0].value];
        QBC_ASSIGN_OR_RETURN(Matrix w, read_matrix(ctx, weight_operand(g, wid, 1)));
        if (!rot || rot->size() != w.rows) continue;
        Matrix wr = w;
        QBC_RETURN_IF_ERROR(rot->left_multiply_transposed(&wr));  // Rᵀ·W
        const int64_t n = static_cast<int64_t>(x.size()) / w.cols;
        const OutputError in(std::move(x), n, w.cols, threads);  // unchanged by the rotation
        QBC_RETURN_IF_ERROR(score(g.node(wid).name, in, in, w, wr));
      }
      if (s + 1 < runner.num_segments()) QBC_RETURN_IF_ERROR(runner.advance_from_last_run(s));
    }
    RotationGate* gate = &ctx.rotation;
    if (linears == 0) {
      // No block reads the residual stream through a norm (EXAONE 4 normalizes after attention
      // and MLP only): there is no norm gain to fold the rotation into, so it does not apply.
      gate->decided = true;
      gate->rotate = false;
      log("quantize")
          .warn(
              "spinR1 policy ifBetter: no linear reads the residual stream through a norm: "
              "normConv and spinR1 are skipped");
      return false;
    }
    gate->decided = true;
    gate->plain = plain / static_cast<double>(linears);
    gate->rotated = rotated / static_cast<double>(linears);
    gate->linears = linears;
    gate->rotate = gate->rotated < gate->plain;
    // A skipped transform the config asked for is shown at the default log level.
    log("quantize")
        .log(gate->rotate ? spdlog::level::info : spdlog::level::warn,
             "spinR1 policy ifBetter: round-to-nearest output error of the {} linears the rotation "
             "changes, mean relative "
             "{:.4g} as is and {:.4g} rotated ({:+.1f} %): {}",
             linears, gate->plain, gate->rotated, 100.0 * (gate->rotated / gate->plain - 1.0),
             gate->rotate ? "normConv and spinR1 run"
                          : "normConv and spinR1 are skipped "
                            "(equivalentTransformation.spinR1.policy: always runs them)");
    return false;  // measures only
  }

 private:
  static GptqOptions quantizer(const PassContext& ctx, const std::string& node, int64_t in) {
    GptqOptions o;
    o.bits = linear_bits(node, false, *ctx.options).weight;
    o.group_size = weight_group(*ctx.options, in);
    o.zero_point = ctx.options->bit().weight_zero_point();
    o.mse_clip = ctx.options->hessian_quant().apply() &&
                 ctx.options->hessian_quant().attributes().mse_clip();
    o.num_threads = 0;
    return o;
  }

  uint64_t seed_;
};

/// A pass that runs `inner` unless the spinR1 check decided against the rotation.
class Gated final : public Pass {
 public:
  explicit Gated(std::unique_ptr<Pass> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  pass::ResourceSet needs() const override { return inner_->needs() | kRotationVerdict; }
  pass::ResourceSet provides() const override { return inner_->provides(); }
  StatusOr<bool> run(PassContext& ctx) override {
    if (!ctx.rotation.rotate) return false;
    return inner_->run(ctx);
  }

 private:
  std::unique_ptr<Pass> inner_;
};

}  // namespace

std::unique_ptr<Pass> make_rotation_check(uint64_t seed) {
  return std::make_unique<RotationCheck>(seed);
}

std::unique_ptr<Pass> gate_on_rotation(std::unique_ptr<Pass> inner) {
  return std::make_unique<Gated>(std::move(inner));
}

}  // namespace qbc::quant
