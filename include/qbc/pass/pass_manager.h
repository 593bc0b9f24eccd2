// The pass manager: runs one stage's pipeline of passes on a context and owns the
// cross-cutting behaviour, so no pass repeats it (XLA's HloPassPipeline, MLIR's
// PassManager). Before the first pass it checks, once, that every pass's needs are
// provided by the initial context or an earlier pass. After every pass it runs the
// stage's verifier (a broken invariant is an internal error naming the pass), times
// the pass, logs whether it changed the unit, reports progress (step k of n) and
// writes the --dump-after text dumps. Passes named by --disable-pass are skipped.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "qbc/pass/pass.h"
#include "qbc/pass/pipeline.h"
#include "qbc/support/status.h"

namespace qbc::pass {

/// One pass's run, for -v output and the ablation table.
struct PassRecord {
  std::string name;
  bool changed = false;
  double seconds = 0.0;
};

/// A pass with its context bound, as the manager's core runs it.
struct Step {
  std::string name;
  ResourceSet needs = 0;
  ResourceSet provides = 0;
  std::function<StatusOr<bool>()> run;
};

/// What the manager needs to know of the unit the passes rewrite.
struct UnitHooks {
  std::string stage;                       ///< "quant", "npu": logger, progress and error prefix.
  std::string dump_extension;              ///< e.g. "mblt.txt".
  std::function<ResourceSet()> available;  ///< Resources the context holds now.
  std::function<std::string(ResourceSet)> describe;  ///< Names of resource bits, for errors.
  /// The unit's storage (a failed write to scratch space): returned as it is, with the
  /// pass's name, since it is not the pass's bug (e.g. a full disk, exit 4). May be empty.
  std::function<Status()> health;
  std::function<Status()> verify;               ///< The unit's invariants.
  std::function<StatusOr<std::string>()> dump;  ///< The unit as text.
};

/// Checks that each step not in instr.disabled needs only what hooks.available() and the
/// earlier enabled steps provide. kFailedPrecondition names the pass, the missing
/// resource and the pass that would have provided it (disabled, or later in the list).
Status check_needs(const std::vector<Step>& steps, const UnitHooks& hooks,
                   const Instrumentation& instr);

/// check_needs, then runs the enabled steps in order as described above. `records`
/// (when non-null) receives one record per pass that ran.
Status run_steps(const std::vector<Step>& steps, const UnitHooks& hooks,
                 const Instrumentation& instr, std::vector<PassRecord>* records);

/// The hooks of a stage's Context, which provides:
///   static constexpr const char* kStage;          // "quant"
///   static constexpr const char* kDumpExtension;  // "mblt.txt"
///   static std::string describe(ResourceSet);
///   ResourceSet available() const;
///   Status health() const;   // storage errors (passed through)
///   Status verify() const;   // invariants (an internal error when broken)
///   StatusOr<std::string> dump_text() const;
template <class Context>
UnitHooks hooks_for(Context& ctx) {
  UnitHooks hooks;
  hooks.stage = Context::kStage;
  hooks.dump_extension = Context::kDumpExtension;
  hooks.available = [&ctx] { return ctx.available(); };
  hooks.describe = [](ResourceSet r) { return Context::describe(r); };
  hooks.health = [&ctx] { return ctx.health(); };
  hooks.verify = [&ctx] { return ctx.verify(); };
  hooks.dump = [&ctx] { return ctx.dump_text(); };
  return hooks;
}

/// Runs `passes` on `ctx` through run_steps.
template <class Context>
Status run_passes(const std::vector<std::unique_ptr<Pass<Context>>>& passes, Context& ctx,
                  const Instrumentation& instr, std::vector<PassRecord>* records) {
  std::vector<Step> steps;
  for (const auto& p : passes) {
    Pass<Context>* raw = p.get();
    steps.push_back(
        {raw->name(), raw->needs(), raw->provides(), [raw, &ctx] { return raw->run(ctx); }});
  }
  return run_steps(steps, hooks_for(ctx), instr, records);
}

/// A pipeline of passes built for one run, with the user's instrumentation.
template <class Context>
class PassManager {
 public:
  explicit PassManager(Instrumentation instr = {}) : instr_(std::move(instr)) {}

  void add(std::unique_ptr<Pass<Context>> pass) { passes_.push_back(std::move(pass)); }
  const std::vector<std::unique_ptr<Pass<Context>>>& passes() const { return passes_; }
  const Instrumentation& instrumentation() const { return instr_; }

  Status run(Context& ctx, std::vector<PassRecord>* records = nullptr) const {
    return run_passes(passes_, ctx, instr_, records);
  }

 private:
  Instrumentation instr_;
  std::vector<std::unique_ptr<Pass<Context>>> passes_;
};

}  // namespace qbc::pass
