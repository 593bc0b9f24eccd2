#include "qbc/pass/pass_manager.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "qbc/support/cancel.h"
#include "qbc/support/file_util.h"
#include "qbc/support/logging.h"

namespace qbc::pass {
namespace {

bool listed(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

/// "03-spinR1.mblt.txt": the pass's position in the pipeline keeps the dumps in order.
std::string dump_name(size_t index, const std::string& pass, const std::string& ext) {
  char prefix[16];
  std::snprintf(prefix, sizeof(prefix), "%02zu-", index + 1);
  return prefix + pass + "." + ext;
}

Status write_dump(const UnitHooks& hooks, const Instrumentation& instr, size_t index,
                  const std::string& pass) {
  QBC_ASSIGN_OR_RETURN(std::string text, hooks.dump());
  const std::string path =
      (std::filesystem::path(instr.dump_dir) / dump_name(index, pass, hooks.dump_extension))
          .string();
  QBC_RETURN_IF_ERROR(write_file_atomic(path, text));
  log(hooks.stage).info("dumped the {} unit after pass {} to {}", hooks.stage, pass, path);
  return ok_status();
}

}  // namespace

Status check_needs(const std::vector<Step>& steps, const UnitHooks& hooks,
                   const Instrumentation& instr) {
  ResourceSet have = hooks.available();
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    if (listed(instr.disabled, s.name)) continue;
    log(hooks.stage)
        .debug("pass {}: needs {:#x}, provides {:#x}, available {:#x}", s.name, s.needs, s.provides,
               have);
    const ResourceSet missing = s.needs & ~have;
    if (missing != 0) {
      // Name who would have provided it: a disabled pass, or one that runs too late.
      std::string hint = "no pass of the pipeline provides it";
      for (size_t j = 0; j < steps.size(); ++j) {
        if (j == i || (steps[j].provides & missing) == 0) continue;
        hint = listed(instr.disabled, steps[j].name)
                   ? "pass " + steps[j].name + " provides it, but --disable-pass removed it"
                   : "pass " + steps[j].name + " provides it, but only later in the pipeline";
        break;
      }
      return failed_precondition("pass ", s.name, " needs ", hooks.describe(missing), ": ", hint);
    }
    have |= s.provides;
  }
  return ok_status();
}

Status run_steps(const std::vector<Step>& steps, const UnitHooks& hooks,
                 const Instrumentation& instr, std::vector<PassRecord>* records) {
  QBC_RETURN_IF_ERROR(check_needs(steps, hooks, instr));
  const bool dump_all = listed(instr.dump_after, "all");
  if (!instr.dump_after.empty()) {
    // Before any work: a folder that cannot be made must not fail a long run at its end.
    std::error_code ec;
    std::filesystem::create_directories(instr.dump_dir, ec);
    if (ec)
      return invalid_argument("--dump-dir ", instr.dump_dir,
                              ": cannot create the folder: ", ec.message());
  }
  const int total = static_cast<int>(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step& s = steps[i];
    if (listed(instr.disabled, s.name)) {
      log(hooks.stage).info("pass {}: disabled (--disable-pass)", s.name);
      continue;
    }
    // check_needs proved this from the declarations; a context that lacks it now means
    // an earlier pass broke its promise.
    if (const ResourceSet missing = s.needs & ~hooks.available(); missing != 0) {
      return internal_error(hooks.stage, ": pass ", s.name, " needs ", hooks.describe(missing),
                            ", which an earlier pass declared but did not provide");
    }
    // A safe point: between passes nothing is half made.
    QBC_RETURN_IF_ERROR(cancel::check(hooks.stage + " pass " + s.name));
    events::step(hooks.stage, static_cast<int>(i) + 1, total, s.name);
    const auto t0 = std::chrono::steady_clock::now();
    StatusOr<bool> changed = s.run();
    if (!changed.ok()) return changed.status().with_context("pass ", s.name);
    if (hooks.health) QBC_RETURN_IF_ERROR(hooks.health().with_context("after pass ", s.name));
    if (Status v = hooks.verify(); !v.ok()) {
      // A pass that leaves the unit invalid is a bug in the pass, whatever the input was.
      return internal_error(hooks.stage, ": pass ", s.name,
                            " broke an invariant (a bug in the pass): ", v.message());
    }
    if (const ResourceSet missing = s.provides & ~hooks.available(); missing != 0) {
      return internal_error(hooks.stage, ": pass ", s.name, " declares that it provides ",
                            hooks.describe(missing), " but did not");
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    log(hooks.stage)
        .info("pass {}: {} in {:.2f} s", s.name, *changed ? "changed the graph" : "no change",
              secs);
    if (records != nullptr) records->push_back({s.name, *changed, secs});
    if (dump_all || listed(instr.dump_after, s.name))
      QBC_RETURN_IF_ERROR(write_dump(hooks, instr, i, s.name));
  }
  events::step_done(hooks.stage);
  return ok_status();
}

}  // namespace qbc::pass
