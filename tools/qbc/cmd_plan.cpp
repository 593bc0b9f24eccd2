// `qbc plan`: fit, speed and context of a model for a target, from its config.json alone
// (shape-only lowering and the cost model; no weights read, no calibration).
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "qbc/driver/plan.h"
#include "qbc/support/logging.h"
#include "qbc/support/progress.h"

namespace qbc::cli {
namespace {

struct PlanFlags {
  std::string model;
  std::string model_config;
  std::string target;
  int kv_bits = 0;
  int64_t prompt_tokens = 240;
  std::string sweep;
  bool json = false;
  bool whole = false;  ///< --whole-programs: time every block (no extrapolation)
  std::string output;
  ConfigFlags config;  ///< with --context and --batch
};

/// The configuration of one plan of the model at `path`: the flags with --target and
/// --kv-bits, `context` / `batch` when positive (a sweep's row) in place of --context /
/// --batch, and lengths a preset gives fitted to the model's trained length.
StatusOr<config::ResolvedConfig> plan_config(const PlanFlags& f, const std::string& path,
                                             int64_t context, int64_t batch,
                                             driver::TrainedContext* trained) {
  ConfigFlags c = f.config;
  if (!f.target.empty()) c.target_profile = f.target;
  if (context > 0) c.context = context;
  if (batch > 0) c.batch = batch;
  if (f.kv_bits > 0) {
    c.sets.push_back("bit.kvCache.key=" + std::to_string(f.kv_bits));
    c.sets.push_back("bit.kvCache.value=" + std::to_string(f.kv_bits));
  }
  return resolve_for_model(c, path, trained);
}

driver::PlanOptions plan_options(const PlanFlags& f, const driver::TrainedContext& trained) {
  driver::PlanOptions po;
  po.prompt_tokens = f.prompt_tokens;
  po.trained_context = trained.positions;
  po.trained_source = trained.source;
  return po;
}

std::string gib(int64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f", static_cast<double>(b) / (1024.0 * 1024 * 1024));
  return buf;
}

/// --sweep context|batch: one plan per row.
Status run_sweep(const PlanFlags& f, const std::string& path) {
  const bool by_batch = f.sweep == "batch";
  const std::vector<int64_t> values =
      by_batch ? std::vector<int64_t>{1, 2, 4, 8, 16, 32}
               : std::vector<int64_t>{4096, 8192, 16384, 32768, 65536, 131072};
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::string text;
  char line[256];
  const std::string ttft = "TTFT@" + std::to_string(f.prompt_tokens) + " ms";
  std::snprintf(line, sizeof(line), "%9s %9s %9s %9s %5s %12s %12s %12s  %s\n",
                by_batch ? "batch" : "context", "total GiB", "KV GiB", "device", "fits",
                ttft.c_str(), "decode tok/s", "at end tok/s", "scheme");
  text += line;
  driver::TrainedContext trained;
  bool any_past = false;
  for (int64_t v : values) {
    QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg,
                         plan_config(f, path, by_batch ? 0 : v, by_batch ? v : 0, &trained));
    driver::PlanOptions po = plan_options(f, trained);
    // The single scheme, unless --inference-scheme names one (then the configured one).
    if (f.config.inference_scheme.empty() || f.config.inference_scheme == "all")
      po.schemes = {isa::Scheme::kSingle};
    QBC_ASSIGN_OR_RETURN(driver::PlanResult r, driver::plan_model(path, cfg, po, !f.whole));
    const driver::SchemePlan* best = nullptr;
    for (const driver::SchemePlan& s : r.schemes) {
      if (best == nullptr || s.prediction.decode_s < best->prediction.decode_s) best = &s;
    }
    const bool past = driver::past_training(r);
    any_past = any_past || past;
    nlohmann::ordered_json row;
    row[by_batch ? "batch" : "context"] = v;
    row["fits"] = r.limits.fits;
    row["past_training"] = past;
    row["total_bytes"] = r.memory.dram.total();
    row["kv_bytes"] = r.memory.dram.kv;
    row["device_bytes"] = r.memory.device_bytes;
    if (best != nullptr) {
      row["scheme"] = isa::scheme_name(best->scheme);
      row["estimate"] = true;
      row["prompt_tokens"] = best->prediction.prompt_tokens;
      row["ttft_ms"] = best->prediction.ttft_s * 1e3;
      row["decode_tok_s"] = 1.0 / best->prediction.decode_s;
      row["decode_tok_s_at_end"] = 1.0 / best->prediction.decode_end_s;
    }
    rows.push_back(row);
    const std::string label = std::to_string(v) + (past ? "*" : "");
    std::snprintf(line, sizeof(line), "%9s %9s %9s %9s %5s %12.1f %12.2f %12.2f  %s\n",
                  label.c_str(), gib(r.memory.dram.total()).c_str(), gib(r.memory.dram.kv).c_str(),
                  gib(r.memory.device_bytes).c_str(), r.limits.fits ? "yes" : "NO",
                  best ? best->prediction.ttft_s * 1e3 : 0.0,
                  best ? 1.0 / best->prediction.decode_s : 0.0,
                  best ? 1.0 / best->prediction.decode_end_s : 0.0,
                  best ? isa::scheme_name(best->scheme) : "-");
    text += line;
  }
  text += "TTFT for " + std::to_string(f.prompt_tokens) +
          " prompt tokens (--prompt-tokens); TTFT and tok/s are estimates of the cost model "
          "(docs/performance.md), not measurements\n";
  if (any_past) {
    text += "* longer than the model was trained for (" + std::to_string(trained.positions) +
            " positions, " + trained.source + "): fits in memory, outside its training\n";
  }
  events::result("plan", rows.dump());
  return emit_output(f.output, f.json ? rows.dump(2) + "\n" : text);
}

Status run_plan(const PlanFlags& f) {
  const auto t0 = std::chrono::steady_clock::now();
  if (f.model.empty() == f.model_config.empty())
    return invalid_argument("plan: give a model folder (or .gguf) or --model-config, not both");
  const std::string path = f.model.empty() ? f.model_config : f.model;
  if (!f.sweep.empty()) return run_sweep(f, path);
  driver::TrainedContext trained;
  StatusOr<config::ResolvedConfig> resolved = plan_config(f, path, 0, 0, &trained);
  // The vision part at the configured vision.imageSize (0: the model's default).
  QBC_ASSIGN_OR_RETURN(
      const driver::VisionPlan vision,
      driver::vision_plan(path, resolved.ok() ? resolved->options.vision().image_size() : 0));
  driver::PlanOptions options = plan_options(f, trained);
  if (vision.present) options.vision = vision.work;
  StatusOr<driver::PlanResult> planned =
      resolved.ok() ? driver::plan_model(path, *resolved, options, !f.whole)
                    : StatusOr<driver::PlanResult>(resolved.status());
  if (!planned.ok() && vision.present && !f.json) {
    // A VLM whose language model is not read yet: its vision part is still reported.
    QBC_RETURN_IF_ERROR(emit_output(f.output, driver::vision_plan_text(vision)));
  }
  QBC_ASSIGN_OR_RETURN(driver::PlanResult r, std::move(planned));
  r.vision = vision;
  if (driver::past_training(r)) log("plan").warn("{}", driver::training_warning(r));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  events::result("plan", driver::plan_json(r));
  QBC_RETURN_IF_ERROR(emit_output(f.output, f.json ? driver::plan_json(r) : driver::plan_text(r)));
  log("plan").info("planned {} for {} in {}", r.model_name, r.target,
                   progress::format_duration(secs));
  const int64_t with_vision = r.memory.dram.total() + driver::vision_dram_bytes(r.vision);
  if (r.limits.fits && r.vision.present && with_vision > r.memory.device_bytes) {
    return resource_exhausted(
        "the language model fits (", npu::human_bytes(r.memory.dram.total()),
        ") but with the vision part (weights ", npu::human_bytes(r.vision.weight_bytes),
        ", activations ", npu::human_bytes(r.vision.work.activation_bytes), ") it needs ",
        npu::human_bytes(with_vision), " of ", npu::human_bytes(r.memory.device_bytes),
        "; see the plan ", f.output.empty() || f.output == "-" ? "above" : "in " + f.output);
  }
  if (!r.limits.fits) {
    // Exit 4. The plan printed above has the breakdown and the largest context and batch that
    // fit, so the error is its first line, not the table again.
    const std::string& m = r.fit.message();
    return resource_exhausted(m.substr(0, m.find('\n')), "; see the plan ",
                              f.output.empty() || f.output == "-" ? "above" : "in " + f.output,
                              " for the breakdown and what fits");
  }
  return ok_status();
}

}  // namespace

void register_plan(CLI::App& app, Action& action) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Does a model fit the target, how fast will it run, at which context: answered from\n"
      "config.json alone (shape-only lowering of the program compile would emit, timed by the\n"
      "cost model of the target profile; no weights read, no calibration). Prints the DRAM\n"
      "table, the largest context and batch that fit, and per scheme the TTFT, decode tok/s\n"
      "after the prompt and with the cache full, the fraction of the DRAM roofline and the\n"
      "bound resource. Exit 4 when the configured deployment does not fit.");
  cmd->add_option("model", f->model, "Model folder (its config.json is read) or .gguf");
  cmd->add_option("--model-config", f->model_config, "A config.json to plan (instead of a folder)");
  cmd->add_option("--target", f->target,
                  "Target profile (built-in name or YAML file), as --target-profile");
  cmd->add_option("--kv-bits", f->kv_bits, "Sets bit.kvCache.key and .value (4, 8 or 16)")
      ->check(CLI::IsMember({4, 8, 16}));
  cmd->add_option("--prompt-tokens", f->prompt_tokens, "Prompt length of the TTFT (default 240)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--sweep", f->sweep,
                  "Print a table over contexts (4K ... 128K) or batches (1 ... 32)")
      ->check(CLI::IsMember({"context", "batch"}))
      ->expected(0, 1)
      ->default_str("context");
  cmd->add_flag("--json", f->json, "Print JSON (docs/cli.md)");
  cmd->add_flag("--whole-programs", f->whole,
                "Lower and time the programs of every block instead of one and two periods of "
                "repeating blocks, extrapolated (slower; the same figures)");
  cmd->add_option("-o,--output", f->output, "Write the report to this file");
  add_config_flags(*cmd, f->config);
  add_context_flags(*cmd, f->config);
  cmd->callback([f, &action] { action = [f] { return run_plan(*f); }; });
}

}  // namespace qbc::cli
