// Running a model: reference sessions, tokenizers, sampling and generation.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "qbc/driver/model_loader.h"
#include "qbc/frontend/tokenizer.h"
#include "qbc/ref/session.h"
#include "qbc/runner/runner.h"

namespace qbc::driver {

/// A float reference session over a loaded model's weights.
StatusOr<std::unique_ptr<ref::Session>> make_session(const LoadedModel& model,
                                                     const ref::SessionOptions& options = {});

/// True when the graph has quantized nodes (qlinear, quantized KV cache).
bool is_quantized(const ir::Graph& g);

/// The runner for a model: the float reference runtime for a float graph, the
/// fake-quant evaluator (docs/numerics.md) for a quantized one.
StatusOr<std::unique_ptr<runner::Runner>> make_runner(const LoadedModel& model,
                                                      const ref::SessionOptions& options = {});

/// The tokenizer that ships with the model (tokenizer.json, or the GGUF vocabulary).
StatusOr<frontend::Tokenizer> load_tokenizer(const LoadedModel& model);

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
StatusOr<GenerateResult> generate(runner::Runner& session, const std::vector<int32_t>& prompt,
                                  int max_new, const SamplingOptions& sampling, int32_t eos_id,
                                  bool ignore_eos, int64_t cache_capacity,
                                  const std::function<void(int32_t)>& on_token = nullptr);

/// The smallest KV-cache capacity over the graph's attention nodes.
int64_t cache_capacity(const ir::Graph& g);

}  // namespace qbc::driver
