// Generation on any Runner: the sampler (greedy, or seeded temperature / top-k / top-p) and the
// prefill-then-decode loop. One implementation for the CLI on every model kind (the float
// reference, the fake-quant evaluator, the runtime on an MXQ) and for the runtime's
// Generator API, so the same seed gives the same tokens everywhere.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "qbc/runner/runner.h"
#include "qbc/support/status.h"

namespace qbc::runner {

/// How the next token is chosen.
struct SamplingOptions {
  bool greedy = true;        ///< Argmax; the other fields are ignored.
  double temperature = 1.0;  ///< > 0.
  int top_k = 0;             ///< Keep the k most likely tokens; 0 = all.
  double top_p = 1.0;        ///< Keep the smallest set with this much probability mass.
  uint64_t seed = 0;         ///< Same seed, same choices, on every machine.
};

/// Chooses tokens from logits. Deterministic for a seed (its own PRNG, no
/// platform-dependent distributions).
class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options);
  int32_t sample(const float* logits, int64_t vocab);

 private:
  double uniform();
  SamplingOptions opt_;
  uint64_t state_;
};

/// What generate() produced.
struct GenerateResult {
  std::vector<int32_t> tokens;  ///< New tokens only.
  bool stopped_at_eos = false;
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

/// Prefills `prompt`, then decodes up to `max_new` tokens one at a time,
/// stopping after `eos_id` unless `ignore_eos`. `on_token` sees each new token.
/// Fails with kResourceExhausted (exit 4) when prompt + max_new exceed the
/// KV-cache capacity, before doing any work.
StatusOr<GenerateResult> generate(Runner& session, const std::vector<int32_t>& prompt, int max_new,
                                  const SamplingOptions& sampling, int32_t eos_id, bool ignore_eos,
                                  int64_t cache_capacity,
                                  const std::function<void(int32_t)>& on_token = nullptr);

}  // namespace qbc::runner
