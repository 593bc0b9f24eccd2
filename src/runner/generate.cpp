// Sampling and generation on a Runner (see qbc/runner/generate.h).
#include "qbc/runner/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "qbc/support/random.h"

namespace qbc::runner {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Sampler::Sampler(const SamplingOptions& options)
    : opt_(options), state_(options.seed ^ 0x9e3779b97f4a7c15ULL) {}

double Sampler::uniform() { return uniform01(state_); }

int32_t Sampler::sample(const float* logits, int64_t vocab) {
  if (opt_.greedy) return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  // Stable order: by logit, then by id, so ties break the same way everywhere.
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  if (opt_.top_k > 0 && opt_.top_k < vocab) ids.resize(static_cast<size_t>(opt_.top_k));
  std::vector<double> p(ids.size());
  const double top = logits[ids[0]];
  double sum = 0;
  for (size_t i = 0; i < ids.size(); ++i)
    sum += p[i] = std::exp((logits[ids[i]] - top) / opt_.temperature);
  double cum = 0;
  size_t keep = ids.size();
  for (size_t i = 0; i < ids.size(); ++i) {
    cum += p[i] / sum;
    if (cum >= opt_.top_p) {
      keep = i + 1;
      break;
    }
  }
  double mass = 0;
  for (size_t i = 0; i < keep; ++i) mass += p[i];
  double r = uniform() * mass;
  for (size_t i = 0; i < keep; ++i) {
    if ((r -= p[i]) <= 0) return ids[i];
  }
  return ids[keep - 1];
}

StatusOr<GenerateResult> generate(Runner& session, const std::vector<int32_t>& prompt, int max_new,
                                  const SamplingOptions& sampling, int32_t eos_id, bool ignore_eos,
                                  int64_t capacity, const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) return invalid_argument("the prompt encodes to no tokens");
  if (max_new < 0) return invalid_argument("-n must be >= 0");
  if (!sampling.greedy && sampling.temperature <= 0)
    return invalid_argument("--temperature must be > 0");
  if (!sampling.greedy && (sampling.top_p <= 0 || sampling.top_p > 1)) {
    return invalid_argument("--top-p must be in (0, 1]");
  }
  const int64_t needed = session.position() + static_cast<int64_t>(prompt.size()) + max_new;
  if (needed > capacity) {
    return resource_exhausted(
        "prompt (", prompt.size(), " tokens) + ", max_new, " new tokens need ", needed,
        " cache slots, but the KV cache holds ", capacity,
        "; raise llm.attributes.maxCacheLength (and re-parse) or generate fewer tokens");
  }
  GenerateResult r;
  std::vector<float> logits;
  auto t0 = std::chrono::steady_clock::now();
  QBC_RETURN_IF_ERROR(session.forward(prompt, &logits));
  r.prefill_seconds = seconds_since(t0);
  const int64_t vocab = session.vocab_size();
  Sampler sampler(sampling);
  const float* last = logits.data() + (prompt.size() - 1) * static_cast<size_t>(vocab);
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < max_new; ++i) {
    const int32_t next = sampler.sample(last, vocab);
    r.tokens.push_back(next);
    if (on_token) on_token(next);
    if (next == eos_id && !ignore_eos) {
      r.stopped_at_eos = true;
      break;
    }
    if (i + 1 == max_new) break;
    QBC_RETURN_IF_ERROR(session.forward({next}, &logits));
    last = logits.data();
  }
  r.decode_seconds = seconds_since(t0);
  return r;
}

}  // namespace qbc::runner
