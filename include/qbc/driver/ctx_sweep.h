// Accuracy against context length (`qbc eval --ctx-sweep`): the accuracy report of
// compare_models() once per context length, on the same text and the same two runners.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qbc/driver/accuracy.h"

namespace qbc::driver {

/// Parses "512,1024,2048": positive lengths (each >= 2), sorted ascending without repeats.
/// An empty, malformed or non-positive entry is an error naming it.
StatusOr<std::vector<int64_t>> parse_ctx_list(const std::string& list);

/// One compare_models() report per length of `ctxs` (ascending), without the per-layer
/// table: `max_chunks` chunks at most per length (-1: all chunks of the text). A length
/// the text cannot fill once is an error naming it.
StatusOr<std::vector<AccuracyReport>> sweep_contexts(
    runner::Runner& test, runner::Runner& reference, const std::vector<int32_t>& tokens,
    int32_t bos_id, const std::vector<int64_t>& ctxs, int64_t max_chunks);

/// The sweep as a text table: one row per length (ctx, chunks, scored tokens, perplexity of
/// both, mean and p99 KLD, top-1 agreement).
std::string format_sweep(const std::vector<AccuracyReport>& rows);
/// The sweep as JSON: {"sweep": [{ctx, chunks, tokens_scored, perplexity,
/// perplexity_reference, kld_mean, kld_p99, kld_max, top1, seconds}, ...]}.
std::string sweep_json(const std::vector<AccuracyReport>& rows);

}  // namespace qbc::driver
