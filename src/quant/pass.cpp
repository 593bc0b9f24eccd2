#include "qbc/quant/pass.h"

#include <chrono>

#include "qbc/ir/verifier.h"
#include "qbc/support/logging.h"

namespace qbc::quant {

void rewrite_weight(PassContext& ctx, const std::string& name, std::vector<float> values) {
  if (const ir::Weight* w = ctx.graph->find_weight(name); w != nullptr) {
    ir::Weight moved = *w;
    moved.source = ir::WeightSource::kSidecar;
    moved.tensor = name;
    moved.type.dtype = ir::DType::kF32;
    ctx.graph->add_weight(moved);
  }
  // A storage failure is sticky in the store and reported after the pass.
  (void)ctx.weights->write(name, values);
}

Status run_passes(const std::vector<std::unique_ptr<Pass>>& passes, PassContext& ctx,
                  std::vector<PassRecord>* records) {
  for (const std::unique_ptr<Pass>& pass : passes) {
    const auto t0 = std::chrono::steady_clock::now();
    events::status("quant", "pass " + pass->name());
    StatusOr<bool> changed = pass->run(ctx);
    if (!changed.ok()) return changed.status().with_context("pass ", pass->name());
    QBC_RETURN_IF_ERROR(ir::verify(*ctx.graph).with_context("verifier after pass ", pass->name()));
    QBC_RETURN_IF_ERROR(check_rewritten_sizes(*ctx.graph, *ctx.weights).with_context("after pass ", pass->name()));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    log("quant").info("pass {}: {} in {:.2f} s", pass->name(), *changed ? "changed the graph" : "no change", secs);
    if (records != nullptr) records->push_back({pass->name(), *changed, secs});
  }
  return ok_status();
}

}  // namespace qbc::quant
