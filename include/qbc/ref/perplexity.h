// Perplexity with llama.cpp's `llama-perplexity` protocol (default mode), on a ref::Session.
//
// Protocol (tools/perplexity/perplexity.cpp, function perplexity()):
//  - the text is tokenized as one sequence, with BOS when the model adds one;
//  - it is cut into n_chunk = n_tokens / ctx non-overlapping chunks of `ctx` tokens (the
//    remainder is dropped); at least 2·ctx tokens are required;
//  - the first token of each chunk is *replaced* (not preceded) by BOS when bos_id >= 0;
//  - the cache is cleared before each chunk and the chunk is evaluated at positions 0..ctx-1;
//  - only the second half is scored: for i in [ctx/2, ctx-1), the log-probability of token
//    i+1 under the logits at i (log-softmax with the max subtracted, the sum in double);
//  - PPL = exp(mean NLL); the error is llama.cpp's sqrt(var(NLL) / (count-1)) · PPL.
//
// Log-probability file (PerplexityOptions::logprobs_path), little-endian, for KL comparisons:
//   header, 64 bytes:
//     char    magic[8]     "QBCPPL01"
//     uint32  version      1
//     uint32  flags        bit 0: full logits rows present
//     int64   n_vocab
//     int64   n_ctx
//     int64   n_chunks
//     int64   n_scored     tokens scored per chunk (= n_ctx - 1 - n_ctx/2)
//     int64   first        first scored position in a chunk (= n_ctx/2)
//     int64   reserved     0
//   then for each chunk, in order:
//     int32   target[n_scored]        the predicted token ids (text tokens i+1)
//     float32 logprob[n_scored]       their log-probabilities
//     float32 logits[n_scored][n_vocab]   only when flags bit 0: the logits rows at i
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <vector>

#include "qbc/runner/runner.h"
#include "qbc/support/status.h"

namespace qbc::ref {

/// Options of perplexity().
struct PerplexityOptions {
  /// Called after each chunk with the chunks done (1-based), the chunk count and the running
  /// PPL (as llama-perplexity prints "[i]ppl").
  std::function<void(int64_t chunk, int64_t n_chunks, double running_ppl)> progress;
  /// When non-empty, the per-token log-probabilities are written there (format above).
  std::filesystem::path logprobs_path;
  /// Also write the full logits rows of the scored positions to `logprobs_path`.
  bool write_logits = false;
  /// Evaluate at most this many chunks (llama.cpp --chunks); < 0 = all.
  int64_t max_chunks = -1;
  /// Run each chunk as the runtime runs a reply (runner::forward_as_reply): tokens up to the
  /// first scored position in one call, then each scored position's token in its own call.
  /// The same numbers as one call per chunk unless the model's phases differ (bit.prefill /
  /// bit.decode images).
  bool as_reply = false;
};

/// The outcome of perplexity().
struct PerplexityResult {
  /// exp(nll_mean).
  double ppl = 0.0;
  /// llama.cpp's "+/-" estimate: sqrt((mean(NLL²) − mean(NLL)²) / (count − 1)) · ppl.
  double ppl_err = 0.0;
  /// Mean negative log-likelihood per scored token (nats).
  double nll_mean = 0.0;
  /// Number of scored tokens (chunks · (ctx − 1 − ctx/2)).
  int64_t tokens_scored = 0;
  /// Number of chunks evaluated.
  int64_t chunks = 0;
  /// Wall time of the evaluation.
  double seconds = 0.0;
  /// Tokens evaluated (chunks · ctx) per second.
  double tokens_per_second = 0.0;
  /// Log-probability of every scored token, chunk by chunk.
  std::vector<float> token_logprobs;
};

/// Runs the protocol above on `tokens` (already containing the BOS the tokenizer adds) with
/// chunks of `ctx` tokens, replacing each chunk's first token by `bos_id` (none when < 0).
/// Resets `session` before each chunk and leaves it reset. kInvalidArgument when ctx < 2, when
/// there are fewer than 2·ctx tokens, or for bad token ids; the session's errors (e.g.
/// kResourceExhausted when ctx exceeds the KV cache) otherwise; errors name the chunk.
StatusOr<PerplexityResult> perplexity(runner::Runner& session, const std::vector<int32_t>& tokens,
                                      int64_t ctx, int32_t bos_id,
                                      const PerplexityOptions& options = {});

}  // namespace qbc::ref
