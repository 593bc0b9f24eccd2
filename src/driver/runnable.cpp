// Opening a model to run and generating text on it (see qbc/driver/runnable.h).
#include "qbc/driver/runnable.h"

#include "qbc/driver/backend.h"
#include "qbc/mxq/model_file.h"
#include "qbc/runtime/model.h"
#include "qbc/runtime/vision_encoder.h"
#include "qbc/support/logging.h"
#include "qbc/tokenizer/text_stream.h"

namespace qbc::driver {
namespace {

/// The runner of `m` for `backend`: auto (the fake-quant evaluator for quantized graphs, the
/// float reference otherwise), npu (the ARIES backend's programs on the NPU executor),
/// fakequant, float.
StatusOr<std::unique_ptr<runner::Runner>> runner_for(const LoadedModel& m,
                                                     const config::ResolvedConfig& cfg,
                                                     const std::string& backend, int threads) {
  if (backend == "npu") return make_npu_runner(m, cfg, threads);
  if (backend != "auto" && backend != "fakequant" && backend != "float") {
    return invalid_argument("--backend '", backend, "': expected auto, npu, fakequant or float");
  }
  const bool quantized = is_quantized(m.graph);
  if (backend == "fakequant" && !quantized)
    return invalid_argument("--backend fakequant needs a quantized .mblt");
  if (backend == "float" && quantized)
    return invalid_argument("--backend float runs float models; this graph is quantized");
  ref::SessionOptions so;
  so.threads = threads;
  return make_runner(m, so);
}

}  // namespace

bool is_compiled_model(const std::string& path) { return mxq::is_mxq_file(path); }

StatusOr<Runnable> open_runnable(const std::string& path, const config::ResolvedConfig& cfg,
                                 const RunnableOptions& options) {
  Runnable o;
  if (mxq::is_mxq_file(path)) {
    if (options.backend != "auto" && options.backend != "npu")
      return invalid_argument(
          "--backend ", options.backend, ": ", path,
          " is compiled MXQ, which runs on the runtime (--backend auto or npu)");
    runtime::LoadOptions lo;
    lo.core_mode = options.core_mode;
    lo.cores = options.cores;
    lo.host_threads = options.threads;
    lo.verify_digests = options.verify_digests;
    QBC_ASSIGN_OR_RETURN(o.generator, runtime::Generator::create(path, lo));
    o.capacity = o.generator->capacity();
    o.session = &o.generator->session();
    o.tok = o.generator->tokenizer();
    return o;
  }
  if (options.core_mode != "auto" || !options.cores.empty())
    return invalid_argument("--core-mode and --cores apply to compiled .mxq models; ", path,
                            " is not one");
  QBC_ASSIGN_OR_RETURN(LoadedModel m, open_model(path, cfg));
  QBC_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, load_tokenizer(m));
  QBC_ASSIGN_OR_RETURN(o.owned, runner_for(m, cfg, options.backend, options.threads));
  o.session = o.owned.get();
  o.capacity = cache_capacity(m.graph);
  o.tok = std::move(tok);
  o.graph = std::move(m);
  return o;
}

StatusOr<ReferenceModel> open_reference(const std::string& path, const config::ResolvedConfig& cfg,
                                        int threads) {
  ReferenceModel r;
  QBC_ASSIGN_OR_RETURN(r.model, open_model(path, cfg));
  ref::SessionOptions so;
  so.threads = threads;
  QBC_ASSIGN_OR_RETURN(r.runner, make_runner(r.model, so));
  return r;
}

StatusOr<std::vector<int32_t>> expand_image_tokens(const std::vector<int32_t>& ids, int32_t mark,
                                                   const std::vector<int32_t>& span, size_t images,
                                                   int32_t bos) {
  size_t found = 0;
  for (int32_t t : ids) found += t == mark ? 1 : 0;
  std::vector<int32_t> in = ids;
  if (found == 0) {
    const auto at = in.begin() + (!in.empty() && in[0] == bos ? 1 : 0);
    in.insert(at, images, mark);
    log("runtime").info("the prompt has no image token (id {}): {} placed at its start", mark,
                        images);
  } else if (found != images) {
    return invalid_argument("the prompt has ", found, " image tokens (id ", mark, ") for ", images,
                            " --image files");
  }
  std::vector<int32_t> out;
  for (int32_t t : in) {
    if (t != mark) {
      out.push_back(t);
      continue;
    }
    out.insert(out.end(), span.begin(), span.end());
  }
  return out;
}

namespace {

/// generate_text of a prompt with images: the vision part encodes them, the generator
/// splices their rows at the expanded image tokens.
StatusOr<GenerateResult> generate_with_images(Runnable& m, const TextRequest& request,
                                              TextResult* res,
                                              const std::function<void(int32_t)>& on_token) {
  if (!m.generator)
    return invalid_argument("--image applies to a compiled VLM (.mxq with a vision part)");
  runtime::Generator& g = *m.generator;
  QBC_ASSIGN_OR_RETURN(
      std::unique_ptr<runtime::VisionEncoder> enc,
      runtime::VisionEncoder::create(g.model().file, g.session().device().mode().scheme));
  std::vector<float> rows;
  for (const std::string& path : request.images) {
    QBC_ASSIGN_OR_RETURN(std::vector<float> r, enc->encode_file(path));
    rows.insert(rows.end(), r.begin(), r.end());
  }
  QBC_ASSIGN_OR_RETURN(res->prompt,
                       expand_image_tokens(res->prompt, enc->prompt_token_id(), enc->image_span(),
                                           request.images.size(), m.tok->bos_id()));
  return g.generate_with_rows(res->prompt, enc->image_token_id(), std::move(rows), request.n,
                              request.sampling, on_token, request.ignore_eos);
}

}  // namespace

StatusOr<TextResult> generate_text(Runnable& m, const TextRequest& request,
                                   const std::function<void(const std::string&)>& on_text) {
  const tokenizer::Tokenizer& tok = *m.tok;
  TextResult res;
  // With images, as the HF processor tokenizes: special tokens written in the prompt (<image>)
  // are parsed.
  bool add_bos = tok.add_bos_default();
  if (request.templated && add_bos && tok.bos_id() >= 0) {
    const std::string bos = tok.token_text(tok.bos_id());
    add_bos = bos.empty() || request.prompt.compare(0, bos.size(), bos) != 0;
  }
  res.prompt = tok.encode(request.prompt, add_bos, request.templated || !request.images.empty());
  if (!request.images.empty()) {
    // The stream starts after the prompt: its text is the user's, not the expanded ids'.
    std::unique_ptr<tokenizer::TextStream> stream;
    auto on_token = [&](int32_t t) {
      if (!stream) stream = std::make_unique<tokenizer::TextStream>(tok, res.prompt);
      const std::string text = stream->push(t);
      if (!text.empty()) on_text(text);
    };
    QBC_ASSIGN_OR_RETURN(res.generated, generate_with_images(m, request, &res, on_token));
    if (stream) on_text(stream->finish());
    return res;
  }
  // Stream text as it is decoded, in the prompt's context (a SentencePiece word's leading
  // space survives) and whole UTF-8 characters at a time.
  tokenizer::TextStream stream(tok, res.prompt);
  auto on_token = [&](int32_t t) {
    const std::string text = stream.push(t);
    if (!text.empty()) on_text(text);
  };
  // An .mxq generates through the runtime's API (runtime::Generator), a graph on its runner;
  // both are runner::generate with the same sampler.
  QBC_ASSIGN_OR_RETURN(
      res.generated,
      m.generator ? m.generator->generate_reusing_cache(res.prompt, request.n, request.sampling,
                                                        on_token, request.ignore_eos)
                  : runner::generate(*m.session, res.prompt, request.n, request.sampling,
                                     tok.eos_id(), request.ignore_eos, m.capacity, on_token));
  on_text(stream.finish());
  return res;
}

}  // namespace qbc::driver
