// llama-perplexity's protocol on a ref::Session (see perplexity.h).
#include "qbc/ref/perplexity.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>

#include "qbc/runner/reply_forward.h"

namespace qbc::ref {
namespace {

/// log-softmax of `row[tok]` as llama.cpp computes it: float max, double sum of expf.
double log_softmax(const float* row, int64_t n_vocab, int32_t tok) {
  float max_logit = row[0];
  for (int64_t i = 1; i < n_vocab; ++i) max_logit = std::max(max_logit, row[i]);
  double sum_exp = 0.0;
  for (int64_t i = 0; i < n_vocab; ++i)
    sum_exp += std::exp(static_cast<double>(row[i] - max_logit));
  return static_cast<double>(row[tok] - max_logit) - std::log(sum_exp);
}

template <typename T>
void put(std::ofstream& f, const T& v) {
  f.write(reinterpret_cast<const char*>(&v), sizeof(T));
}

}  // namespace

StatusOr<PerplexityResult> perplexity(runner::Runner& session, const std::vector<int32_t>& tokens,
                                      int64_t ctx, int32_t bos_id,
                                      const PerplexityOptions& options) {
  const int64_t n_tokens = static_cast<int64_t>(tokens.size());
  if (ctx < 2)
    return invalid_argument("perplexity: context ", ctx, " is too small (need at least 2)");
  if (n_tokens < 2 * ctx) {
    return invalid_argument("perplexity: ", n_tokens, " tokens; need at least 2*ctx = ", 2 * ctx);
  }
  int64_t n_chunks = n_tokens / ctx;
  if (options.max_chunks >= 0) n_chunks = std::min(n_chunks, options.max_chunks);
  const int64_t first = ctx / 2;
  const int64_t n_scored = ctx - 1 - first;
  const int64_t n_vocab = session.vocab_size();

  std::ofstream file;
  if (!options.logprobs_path.empty()) {
    file.open(options.logprobs_path, std::ios::binary | std::ios::trunc);
    if (!file) return not_found("perplexity: cannot write ", options.logprobs_path.string());
    file.write("QBCPPL01", 8);
    put<uint32_t>(file, 1);
    put<uint32_t>(file, options.write_logits ? 1u : 0u);
    for (int64_t v : {n_vocab, ctx, n_chunks, n_scored, first, int64_t{0}}) put<int64_t>(file, v);
  }

  PerplexityResult r;
  r.token_logprobs.reserve(static_cast<size_t>(n_chunks * n_scored));
  double nll = 0.0;
  double nll2 = 0.0;
  std::vector<int32_t> chunk(static_cast<size_t>(ctx));
  std::vector<float> logits;
  std::vector<int32_t> targets(static_cast<size_t>(n_scored));
  std::vector<float> lps(static_cast<size_t>(n_scored));
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t c = 0; c < n_chunks; ++c) {
    const auto begin = tokens.begin() + c * ctx;
    std::copy(begin, begin + ctx, chunk.begin());
    if (bos_id >= 0) chunk[0] = bos_id;
    session.reset();
    QBC_RETURN_IF_ERROR((options.as_reply
                             ? runner::forward_chunk_as_reply(session, chunk, first, &logits)
                             : session.forward(chunk, &logits))
                            .with_context("perplexity: chunk ", c + 1, "/", n_chunks));
    for (int64_t i = first; i < ctx - 1; ++i) {
      // The target is the text's token, not the BOS-replaced one (i + 1 >= 1 anyway).
      const int32_t tok = tokens[static_cast<size_t>(c * ctx + i + 1)];
      const double lp = log_softmax(logits.data() + i * n_vocab, n_vocab, tok);
      nll -= lp;
      nll2 += lp * lp;
      targets[static_cast<size_t>(i - first)] = tok;
      lps[static_cast<size_t>(i - first)] = static_cast<float>(lp);
      r.token_logprobs.push_back(static_cast<float>(lp));
    }
    if (file.is_open()) {
      file.write(reinterpret_cast<const char*>(targets.data()),
                 static_cast<std::streamsize>(targets.size() * 4));
      file.write(reinterpret_cast<const char*>(lps.data()),
                 static_cast<std::streamsize>(lps.size() * 4));
      if (options.write_logits) {
        file.write(reinterpret_cast<const char*>(logits.data() + first * n_vocab),
                   static_cast<std::streamsize>(n_scored * n_vocab * 4));
      }
    }
    r.tokens_scored += n_scored;
    r.chunks = c + 1;
    if (options.progress)
      options.progress(c + 1, n_chunks, std::exp(nll / static_cast<double>(r.tokens_scored)));
  }
  session.reset();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (file.is_open()) {
    file.close();
    if (!file) return data_loss("perplexity: writing ", options.logprobs_path.string(), " failed");
  }
  const double count = static_cast<double>(r.tokens_scored);
  r.nll_mean = nll / count;
  r.ppl = std::exp(r.nll_mean);
  const double var = nll2 / count - r.nll_mean * r.nll_mean;
  r.ppl_err = (var > 0.0 && count > 1) ? std::sqrt(var / (count - 1)) * r.ppl : 0.0;
  r.tokens_per_second = r.seconds > 0 ? static_cast<double>(r.chunks * ctx) / r.seconds : 0.0;
  return r;
}

}  // namespace qbc::ref
