// calibrateScales, calibrate and quantizeRtn: the quant pipeline's fixed stages.
#include "qbc/quant/stage_passes.h"

#include <algorithm>
#include <chrono>

#include "qbc/quant/calib_checkpoint.h"
#include "qbc/support/logging.h"

namespace qbc::quant {
namespace {

/// FLOPs of the float linears per token (2 per weight).
double linear_flops_per_token(const ir::Graph& g) {
  double per_token = 0;
  for (const ir::Node& node : g.nodes()) {
    if (node.op != ir::Op::kLinear) continue;
    if (const ir::Weight* w = g.find_weight(node.operands[1].weight); w != nullptr) {
      per_token += 2.0 * static_cast<double>(w->type.num_elements());
    }
  }
  return per_token;
}

class Calibrate final : public Pass {
 public:
  explicit Calibrate(bool for_scales) : for_scales_(for_scales) {}
  std::string name() const override { return for_scales_ ? "calibrateScales" : "calibrate"; }
  pass::ResourceSet needs() const override { return kCalibSamples; }
  pass::ResourceSet provides() const override { return for_scales_ ? kScaleStats : kFinalStats; }

  StatusOr<bool> run(PassContext& ctx) override {
    const std::string n = std::to_string(ctx.num_samples);
    events::status("calib", for_scales_ ? "statistics for the scale migrations on " + n + " samples"
                                        : "collecting activation statistics on " + n +
                                              " samples, block by block");
    const auto t0 = std::chrono::steady_clock::now();
    const int mode = ctx.options->calibration().mode();
    const CalibCheckpoint checkpoint{ctx.checkpoints, name()};
    QBC_ASSIGN_OR_RETURN(
        ctx.owned_stats,
        collect_stats_blockwise(*ctx.graph, ctx.weights->reader(), ctx.num_samples, *ctx.samples,
                                mode, ctx.session, &checkpoint, ctx.deepstack));
    ctx.stats = &ctx.owned_stats;
    ctx.stats_resource = provides();
    if (!for_scales_) {
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const int64_t tokens = stats_tokens(ctx.owned_stats);
      const int passes = mode == 0 ? 1 : 2;
      log("calib").info(
          "calibration: {} tokens x {} pass(es) in {:.2f} s, {:.1f} GFLOP/s in linears", tokens,
          passes, secs,
          linear_flops_per_token(*ctx.graph) * static_cast<double>(tokens * passes) /
              std::max(secs, 1e-9) / 1e9);
    }
    return false;  // statistics only: the graph is unchanged
  }

 private:
  bool for_scales_;
};

class QuantizeRtn final : public Pass {
 public:
  std::string name() const override { return "quantizeRtn"; }
  pass::ResourceSet needs() const override { return kFinalStats | kTensorSink; }

  StatusOr<bool> run(PassContext& ctx) override {
    events::status("quant", "quantizing weights (round to nearest)");
    QBC_ASSIGN_OR_RETURN(QuantizeResult q,
                         quantize_rtn(*ctx.graph, *ctx.stats, ctx.weights->reader(), *ctx.options,
                                      ctx.sink, ctx.fixed, {}, &ctx.second_images_chosen));
    FixedWeightMap().swap(ctx.second_images_chosen);  // written: their memory goes
    *ctx.graph = std::move(q.graph);
    ctx.quantized_linears = q.quantized_linears;
    ctx.float_linears = q.float_linears;
    ctx.second_images = q.second_images;
    return true;
  }
};

}  // namespace

int64_t stats_tokens(const CalibStats& stats) {
  for (const auto& [name, st] : stats) {
    if (!st.channel_absmax.empty())
      return st.count / static_cast<int64_t>(st.channel_absmax.size());
  }
  return 0;
}

std::unique_ptr<Pass> make_calibrate(bool for_scales) {
  return std::make_unique<Calibrate>(for_scales);
}

std::unique_ptr<Pass> make_quantize_rtn() { return std::make_unique<QuantizeRtn>(); }

}  // namespace qbc::quant
