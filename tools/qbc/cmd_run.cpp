// qbc run, qbc eval: executing a model (HF folder, .gguf or .mblt) with the
// float reference runtime.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "cli.h"
#include "qbc/driver/accuracy.h"
#include "qbc/driver/chat_prompt.h"
#include "qbc/driver/ctx_sweep.h"
#include "qbc/driver/exec_trace.h"
#include "qbc/driver/image_eval.h"
#include "qbc/driver/layer_basis.h"
#include "qbc/driver/runnable.h"
#include "qbc/runtime/generator.h"
#include "qbc/runtime/model.h"
#include "qbc/support/file_util.h"
#include "qbc/support/logging.h"

namespace qbc::cli {
namespace {

/// How an .mxq runs (run, eval).
struct MxqFlags {
  std::string core_mode = "auto";
  std::vector<std::string> cores;
  bool no_verify = false;
};

void add_mxq_flags(CLI::App& cmd, MxqFlags& f) {
  const std::vector<std::string> modes = runtime::core_modes();
  std::string names = "auto (the file's only mode)";
  for (size_t i = 1; i < modes.size(); ++i)
    names += (i + 1 == modes.size() ? " or " : ", ") + modes[i];
  cmd.add_option("--core-mode", f.core_mode, "MXQ: the mode to run, " + names)
      ->check(CLI::IsMember(modes))
      ->group("MXQ");
  cmd.add_option("--cores", f.cores,
                 "MXQ: physical cores as cluster:core, comma-separated (single: one per sequence "
                 "slot; multi, global4: one cluster's four; global8: all eight); default the "
                 "first cores")
      ->delimiter(',')
      ->group("MXQ");
  cmd.add_flag("--no-verify", f.no_verify,
               "MXQ: skip the section digests (the format rules and the program verifier "
               "still run)")
      ->group("MXQ");
}

struct RunOptions {
  MxqFlags mxq;
  ConfigFlags config;
  std::string model;
  std::string prompt;
  int n = 32;
  bool greedy = false;
  double temperature = 0;
  int top_k = 0;
  double top_p = 1.0;
  bool ids = false;
  bool ignore_eos = false;
  int threads = 0;
  std::string backend = "auto";
  std::string load_cache, save_cache;  ///< MXQ: sequence cache files (docs/runtime.md)
  std::string trace;                   ///< MXQ: the executor's timeline (Chrome trace JSON)
  std::vector<std::string> images;     ///< MXQ of a VLM: --image files
  bool chat = false;                   ///< render the prompt with the model's chat template
  std::string system;                  ///< --chat: a system message
};

/// The driver's options for opening `model` with the MXQ flags.
driver::RunnableOptions runnable_options(const MxqFlags& f, const std::string& backend,
                                         int threads) {
  driver::RunnableOptions r;
  r.backend = backend;
  r.threads = threads;
  r.core_mode = f.core_mode;
  r.cores = f.cores;
  r.verify_digests = !f.no_verify;
  return r;
}

/// `run --trace`: the executor's recorded timeline to `path`, with a summary line.
Status write_exec_trace(const std::string& path, const runtime::Device& device,
                        const runtime::ExecTrace& trace) {
  QBC_ASSIGN_OR_RETURN(std::string json,
                       driver::exec_trace_json(device.bundle(), device.mode(), trace));
  QBC_RETURN_IF_ERROR(write_file_atomic(path, json));
  const driver::ExecTraceSummary s = driver::summarize(trace);
  char figures[128];
  std::snprintf(figures, sizeof(figures), "prefill chunk %.1f us, decode step %.1f us mean",
                s.prefill_us, s.decode_mean_us);
  events::summary(
      "trace",
      "wrote " + path + " (" + std::to_string(s.spans) + " instructions in " +
          std::to_string(s.calls) + " calls: " + figures +
          "; measured host-executor times, open in ui.perfetto.dev)",
      nlohmann::json({{"trace", path}, {"calls", s.calls}, {"events", s.spans}}).dump());
  return ok_status();
}

Status run_run(const RunOptions& o) {
  if (!o.system.empty() && !o.chat) return invalid_argument("--system needs --chat");
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, resolve_for_input(o.config, o.model));
  QBC_ASSIGN_OR_RETURN(
      driver::Runnable opened,
      driver::open_runnable(o.model, cfg, runnable_options(o.mxq, o.backend, o.threads)));
  if ((!o.load_cache.empty() || !o.save_cache.empty()) && !opened.generator)
    return invalid_argument("--load-cache and --save-cache apply to compiled .mxq models; ",
                            o.model, " is not one");
  if (!o.trace.empty() && !opened.generator)
    return invalid_argument("--trace applies to compiled .mxq models; ", o.model, " is not one");
  runtime::ExecTrace trace;
  if (!o.trace.empty()) opened.generator->session().device().set_trace(&trace);
  if (!o.load_cache.empty()) {
    QBC_ASSIGN_OR_RETURN(std::string bytes, read_text_file(o.load_cache));
    QBC_RETURN_IF_ERROR(opened.generator->load_cache(bytes, o.load_cache));
  }
  driver::TextRequest req;
  req.prompt = o.prompt;
  if (o.chat) {
    driver::ChatRequest chat;
    chat.system = o.system;
    chat.user = o.prompt;
    chat.images = o.images.size();
    QBC_ASSIGN_OR_RETURN(req.prompt, driver::render_chat_prompt(opened, chat));
    req.templated = true;
  }
  req.n = o.n;
  req.sampling.greedy = o.greedy || o.temperature <= 0;
  req.sampling.temperature = o.temperature;
  req.sampling.top_k = o.top_k;
  req.sampling.top_p = o.top_p;
  req.sampling.seed = static_cast<uint64_t>(cfg.options.seed());  // --seed, or `seed` in a config
  req.ignore_eos = o.ignore_eos;
  req.images = o.images;
  std::fputs(req.prompt.c_str(), stdout);
  QBC_ASSIGN_OR_RETURN(driver::TextResult out,
                       driver::generate_text(opened, req, [](const std::string& text) {
                         if (text.empty()) return;
                         std::fputs(text.c_str(), stdout);
                         std::fflush(stdout);
                       }));
  std::fputs("\n", stdout);
  const std::vector<int32_t>& prompt = out.prompt;
  const driver::GenerateResult& r = out.generated;
  if (!o.save_cache.empty()) {
    QBC_ASSIGN_OR_RETURN(std::string bytes, opened.generator->save_cache());
    QBC_RETURN_IF_ERROR(write_file_atomic(o.save_cache, bytes));
  }
  if (!o.trace.empty()) {
    opened.generator->session().device().set_trace(nullptr);
    QBC_RETURN_IF_ERROR(write_exec_trace(o.trace, opened.generator->session().device(), trace));
  }
  nlohmann::ordered_json j;
  j["prompt_tokens"] = prompt;
  if (opened.generator) j["cached_prompt_tokens"] = opened.generator->reused_tokens();
  j["new_tokens"] = r.tokens;
  j["stopped_at_eos"] = r.stopped_at_eos;
  j["prefill_tokens_per_second"] = prompt.size() / std::max(r.prefill_seconds, 1e-9);
  j["decode_tokens_per_second"] = r.tokens.size() / std::max(r.decode_seconds, 1e-9);
  if (o.ids) {
    std::ostringstream os;
    os << "prompt ids:";
    for (int32_t t : prompt) os << " " << t;
    os << "\nnew ids:";
    for (int32_t t : r.tokens) os << " " << t;
    os << "\n";
    std::fputs(os.str().c_str(), stdout);
  }
  log("runtime").info("prefill {} tokens at {:.1f} tok/s, decode {} tokens at {:.1f} tok/s",
                      prompt.size(), j["prefill_tokens_per_second"].get<double>(), r.tokens.size(),
                      j["decode_tokens_per_second"].get<double>());
  events::result("run", j.dump());
  return ok_status();
}

struct EvalOptions {
  MxqFlags mxq;
  ConfigFlags config;
  std::string model;
  std::string text;
  int64_t ctx = 256;
  int64_t chunks = -1;
  std::string logprobs;
  std::string reference;
  bool logits = false;
  bool as_reply = false;  ///< each chunk as a reply: prompt in one call, then a call per token
  bool json = false;
  int threads = 0;
  std::string backend = "auto";
  std::string ctx_sweep;  ///< "512,1024,...": the accuracy report per context length
  std::string images;     ///< a folder of image-text pairs (a compiled VLM against its folder)
};

// The accuracy report: the model against a float reference on the same tokens.
Status run_compare(const EvalOptions& o, const ir::Graph* graph, runner::Runner& test,
                   const std::vector<int32_t>& tokens, int32_t bos,
                   const config::ResolvedConfig& cfg) {
  QBC_ASSIGN_OR_RETURN(driver::ReferenceModel r,
                       driver::open_reference(o.reference, cfg, o.threads));
  // Block outputs and every projection present in both graphs, each in a basis where the
  // two compare (driver/layer_basis.h: spinR1's rotation undone, re-based outputs left out).
  driver::LayerSelection layers;
  if (graph != nullptr) {
    QBC_ASSIGN_OR_RETURN(layers, driver::select_layers(*graph, r.model.graph));
  }
  if (!o.ctx_sweep.empty()) {  // --ctx-sweep: one row per length (driver/ctx_sweep.h)
    QBC_ASSIGN_OR_RETURN(std::vector<int64_t> ctxs, driver::parse_ctx_list(o.ctx_sweep));
    QBC_ASSIGN_OR_RETURN(std::vector<driver::AccuracyReport> rows,
                         driver::sweep_contexts(test, *r.runner, tokens, bos, ctxs, o.chunks));
    const std::string json = driver::sweep_json(rows);
    events::result("eval", json);
    return emit_output("", o.json ? json : driver::format_sweep(rows));
  }
  driver::CompareOptions co;
  co.ctx = o.ctx;
  co.max_chunks = o.chunks;
  co.as_reply = o.as_reply;
  co.undo_spin_r1 = layers.undo_spin_r1;
  QBC_ASSIGN_OR_RETURN(driver::AccuracyReport rep,
                       driver::compare_models(test, *r.runner, tokens, bos, layers.nodes, co));
  rep.layers_left_out = layers.left_out;
  const std::string json = driver::report_json(rep);
  events::result("eval", json);
  return emit_output("", o.json ? json : driver::format_report(rep));
}

/// `eval --images DIR`: the compiled VLM against its float folder on image-text pairs.
Status run_image_eval(const EvalOptions& o) {
  if (o.reference.empty())
    return invalid_argument("--images needs --reference (the VLM's float HF folder)");
  if (!o.text.empty() || !o.ctx_sweep.empty() || o.as_reply)
    return invalid_argument("--images scores the text files beside the images; leave out --text, ",
                            "--ctx-sweep and --as-reply");
  QBC_ASSIGN_OR_RETURN(const std::vector<driver::ImageTextPair> pairs,
                       driver::list_image_text_pairs(o.images));
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, resolve_for_input(o.config, o.model));
  QBC_ASSIGN_OR_RETURN(
      driver::Runnable opened,
      driver::open_runnable(o.model, cfg, runnable_options(o.mxq, o.backend, o.threads)));
  if (!opened.generator)
    return invalid_argument("--images scores a compiled VLM (.mxq with a vision part); ", o.model,
                            " is not one");
  QBC_ASSIGN_OR_RETURN(
      const driver::ImageEvalReport r,
      driver::eval_image_pairs(*opened.generator, o.model, o.reference, cfg, pairs, o.threads));
  const std::string json = driver::image_eval_json(r);
  events::result("eval", json);
  return emit_output(
      "", o.json ? nlohmann::json::parse(json).dump(2) + "\n" : driver::format_image_eval(r));
}

Status run_eval(const EvalOptions& o) {
  if (!o.images.empty()) return run_image_eval(o);
  if (o.text.empty()) return invalid_argument("--text is required (or --images for a VLM)");
  if (o.ctx < 2) return invalid_argument("--ctx must be >= 2");
  QBC_ASSIGN_OR_RETURN(std::string text, read_text_file(o.text));
  QBC_ASSIGN_OR_RETURN(config::ResolvedConfig cfg, resolve_for_input(o.config, o.model));
  if (!o.ctx_sweep.empty() && o.reference.empty())
    return invalid_argument("--ctx-sweep needs --reference (KLD and top-1 against a float model)");
  if (o.as_reply && !o.ctx_sweep.empty())
    return invalid_argument("--as-reply scores one --ctx; it does not combine with --ctx-sweep");
  QBC_ASSIGN_OR_RETURN(
      driver::Runnable opened,
      driver::open_runnable(o.model, cfg, runnable_options(o.mxq, o.backend, o.threads)));
  int64_t longest = o.ctx;
  if (!o.ctx_sweep.empty()) {
    QBC_ASSIGN_OR_RETURN(std::vector<int64_t> ctxs, driver::parse_ctx_list(o.ctx_sweep));
    longest = ctxs.back();
  }
  if (opened.capacity < longest) {
    return resource_exhausted(o.ctx_sweep.empty() ? "--ctx " : "--ctx-sweep length ", longest,
                              " exceeds the KV-cache capacity ", opened.capacity, " of ", o.model,
                              "; raise llm.attributes.maxCacheLength");
  }
  const auto& tok = *opened.tok;
  runner::Runner* session = opened.session;
  // As llama-perplexity: the whole text is one sequence, with BOS when the model adds one.
  const std::vector<int32_t> tokens = tok.encode(text, tok.add_bos_default());
  if (o.ctx_sweep.empty() && static_cast<int64_t>(tokens.size()) < o.ctx) {
    return invalid_argument(o.text, ": ", tokens.size(), " tokens, fewer than one chunk of --ctx ",
                            o.ctx);
  }
  if (!o.reference.empty())
    return run_compare(o, opened.graph ? &opened.graph->graph : nullptr, *session, tokens,
                       tok.bos_id(), cfg);
  driver::PerplexityRequest pr;
  pr.ctx = o.ctx;
  pr.max_chunks = o.chunks;
  pr.logprobs_path = o.logprobs;
  pr.write_logits = o.logits;
  pr.as_reply = o.as_reply;
  QBC_ASSIGN_OR_RETURN(driver::PerplexityResult r,
                       driver::perplexity(*session, tokens, tok.bos_id(), pr));
  nlohmann::ordered_json j = {{"model", o.model},
                              {"text", o.text},
                              {"ctx", o.ctx},
                              {"chunks", r.chunks},
                              {"tokens_scored", r.tokens_scored},
                              {"perplexity", r.ppl},
                              {"perplexity_stderr", r.ppl_err},
                              {"nll_mean", r.nll_mean},
                              {"seconds", r.seconds},
                              {"tokens_per_second", r.tokens_per_second}};
  events::result("eval", j.dump());
  if (o.json) return emit_output("", j.dump(2) + "\n");
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(4);
  os << "perplexity " << r.ppl << " +/- " << r.ppl_err << " over " << r.chunks << " chunks of "
     << o.ctx << " tokens (" << r.tokens_scored << " scored)\n";
  os.precision(1);
  os << "speed " << r.tokens_per_second << " tokens/s (" << r.seconds << " s)\n";
  return emit_output("", os.str());
}

}  // namespace

void register_run(CLI::App& app, Action& action) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run",
                                     "Generate text: prefill the prompt, then decode token by "
                                     "token with a KV cache. MODEL is an HF\n"
                                     "folder, a .gguf, an .mblt (float graphs run on the "
                                     "LibTorch reference runtime, quantized\n"
                                     "ones on the fake-quant evaluator of docs/numerics.md) or a "
                                     "compiled .mxq (on the runtime).\n"
                                     "Sampling is seeded by --seed (the config's `seed`): same "
                                     "seed, same text, on every machine.");
  cmd->add_option("model", o->model, "HF folder, .gguf, .mblt or compiled .mxq")->required();
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text")->required();
  cmd->add_option("-n,--n-predict", o->n, "Tokens to generate (stops early at EOS)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--greedy", o->greedy,
                "Pick the most likely token (the default without --temperature)");
  cmd->add_option("--temperature", o->temperature, "Sample with this temperature (> 0)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--top-k", o->top_k, "Sample among the k most likely tokens (0 = all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", o->top_p,
                  "Sample among the smallest set holding this probability mass");
  cmd->add_flag("--chat", o->chat,
                "Render the prompt as one user turn with the model's chat template (the .mxq's, "
                "or the folder's chat_template.jinja / chat_template.json / "
                "tokenizer_config.json, or the GGUF's), ending in the assistant's turn; with "
                "--image the turn holds the images first, marked as the template marks them");
  cmd->add_option("--system", o->system, "With --chat: a system message before the user turn");
  cmd->add_flag("--ids", o->ids, "Also print the prompt and generated token ids");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "Keep generating after the end-of-sequence token");
  cmd->add_option("--threads", o->threads, "Compute threads (0 = all cores)");
  cmd->add_option("--load-cache", o->load_cache,
                  "MXQ: start from this sequence cache file (of --save-cache): the cached "
                  "tokens that begin the prompt are not run again")
      ->group("MXQ");
  cmd->add_option("--save-cache", o->save_cache,
                  "MXQ: write the sequence's KV cache and its token ids to this file at the end")
      ->group("MXQ");
  cmd->add_option("--image", o->images,
                  "MXQ of a VLM: an image (PNG or JPEG; repeatable) for the prompt's image "
                  "tokens (e.g. <image> for LLaVA; one is put at the start of a prompt without "
                  "any), preprocessed and encoded by the file's vision part (docs/multimodal.md)")
      ->group("MXQ");
  cmd->add_option("--trace", o->trace,
                  "MXQ: write the executor's timeline of the run (its first prefill chunk and up "
                  "to 64 decode steps, every instruction on its core and queue, measured on the "
                  "host) to this Chrome trace JSON file for ui.perfetto.dev")
      ->group("MXQ");
  cmd->add_option("--backend", o->backend,
                  "auto (quantized .mblt: the fake-quant evaluator; float models: LibTorch), npu "
                  "(compile for the configured target and run the NPU programs on the executor: "
                  "the same logits as the fake-quant evaluator, bit for bit), fakequant, float")
      ->check(CLI::IsMember({"auto", "npu", "fakequant", "float"}));
  add_mxq_flags(*cmd, o->mxq);
  add_config_flags(*cmd, o->config);
  cmd->callback([o, &action] { action = [o] { return run_run(*o); }; });
}

void register_eval(CLI::App& app, Action& action) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* cmd = app.add_subcommand(
      "eval",
      "Perplexity with llama.cpp's protocol: non-overlapping chunks of --ctx tokens, BOS at each "
      "chunk\n"
      "start, only the second half of each chunk scored. Prints perplexity and tokens/s.");
  cmd->add_option("model", o->model, "HF folder, .gguf, .mblt or compiled .mxq")->required();
  cmd->add_option("--text", o->text, "Text file to score (required unless --images)");
  cmd->add_option("--images", o->images,
                  "A compiled VLM (.mxq) against its float HF folder (--reference) on the\n"
                  "image-text pairs of this folder: each PNG/JPEG with a .txt of the same name,\n"
                  "the text that follows the image (the prompt is built as `qbc run --image`\n"
                  "builds it). Prints per pair the feature SQNR of the image's rows and the\n"
                  "text's KLD and top-1 against the float model, then the totals");
  cmd->add_option("--ctx", o->ctx, "Tokens per chunk");
  cmd->add_option("--ctx-sweep", o->ctx_sweep,
                  "With --reference: the accuracy report (perplexity of both, KLD, top-1) once per "
                  "context length\nof this comma-separated list (e.g. 512,1024,2048), one row "
                  "each, in ascending order");
  cmd->add_option("--chunks", o->chunks, "Score at most this many chunks (-1 = all)");
  cmd->add_option("--logprobs", o->logprobs,
                  "Write per-token log-probabilities to this file (format: docs/cli.md)");
  cmd->add_option(
      "--reference", o->reference,
      "Compare against this float model (HF folder, .gguf or .mblt): perplexity of both, mean/p99\n"
      "KL divergence, top-1 agreement and per-layer SQNR on the same token stream");
  cmd->add_flag("--logits", o->logits,
                "With --logprobs, also write the full logits of scored positions");
  cmd->add_flag("--as-reply", o->as_reply,
                "Score each chunk as the runtime runs a reply: its first half, up to the first "
                "scored position, as one prompt call (the prefill programs), then each later "
                "token in a call of its own (the decode programs), teacher-forced. The same "
                "numbers as one call per chunk unless the "
                "model's phases read different weight images (bit.prefill / bit.decode, "
                "docs/quantization.md \"Precision per phase\"); slower (a call per token)");
  cmd->add_flag("--json", o->json, "Print the result as JSON");
  cmd->add_option("--threads", o->threads, "Compute threads (0 = all cores)");
  cmd->add_option("--backend", o->backend,
                  "auto (quantized .mblt: the fake-quant evaluator; float models: LibTorch), npu "
                  "(compile for the configured target and run the NPU programs on the executor: "
                  "the same logits as the fake-quant evaluator, bit for bit), fakequant, float")
      ->check(CLI::IsMember({"auto", "npu", "fakequant", "float"}));
  add_mxq_flags(*cmd, o->mxq);
  add_config_flags(*cmd, o->config);
  cmd->callback([o, &action] { action = [o] { return run_eval(*o); }; });
}

}  // namespace qbc::cli
