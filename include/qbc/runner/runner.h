// The runner seam: a model that runs token by token with a KV cache, seen only through
// tokens, embeddings and logits. It names no IR type, so anything that can execute a model
// implements it: the float reference Session (ref), the fake-quant evaluator (quant) and a
// runtime that knows only the MXQ file. Generation, perplexity and accuracy reports run on
// any Runner. Only the standard library and support/status.h are included here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "qbc/support/status.h"

namespace qbc::runner {

/// OK when every token id is in [0, vocab); otherwise names the first bad id and its position.
inline Status check_token_ids(const std::vector<int32_t>& tokens, int64_t vocab) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return invalid_argument("token id ", tokens[i], " at position ", i,
                              " is out of range for vocab size ", vocab);
    }
  }
  return ok_status();
}

/// The host-side embedding: after check_token_ids, `row(id, dst)` writes the `hidden` values
/// of token `id` to `dst` for each of `tokens`, filling `out` [tokens.size(), hidden]. For a
/// table held other than as fp32 rows (an MXQ's bf16 table).
template <typename RowFn>
Status embed_tokens_by_row(int64_t vocab, int64_t hidden, const std::vector<int32_t>& tokens,
                           const RowFn& row, std::vector<float>* out) {
  QBC_RETURN_IF_ERROR(check_token_ids(tokens, vocab));
  out->resize(tokens.size() * static_cast<size_t>(hidden));
  for (size_t i = 0; i < tokens.size(); ++i)
    row(tokens[i], out->data() + static_cast<int64_t>(i) * hidden);
  return ok_status();
}

/// The same from rows of an fp32 `table` [vocab, hidden].
inline Status embed_tokens(const float* table, int64_t vocab, int64_t hidden,
                           const std::vector<int32_t>& tokens, std::vector<float>* out) {
  return embed_tokens_by_row(
      vocab, hidden, tokens,
      [&](int32_t id, float* dst) {
        std::copy_n(table + static_cast<int64_t>(id) * hidden, hidden, dst);
      },
      out);
}

/// A model that runs token by token with a KV cache (batch 1): the float
/// reference Session and the fake-quant evaluator both implement it, so
/// generation, perplexity and accuracy reports work on either.
class Runner {
 public:
  virtual ~Runner() = default;
  /// Embeds `tokens` with the host embedding table and runs them at the next
  /// positions, appending to the KV cache. `logits` receives [tokens.size(), vocab]
  /// row-major. Fails (kResourceExhausted) when the cache would overflow.
  virtual Status forward(const std::vector<int32_t>& tokens, std::vector<float>* logits) = 0;
  /// The same from already-embedded inputs [seq, hidden] (row-major).
  virtual Status forward_embeds(const std::vector<float>& embeds, int64_t seq,
                                std::vector<float>* logits) = 0;
  /// Empties the KV caches; the next call starts at position 0.
  virtual void reset() = 0;
  /// Tokens held in the cache.
  virtual int64_t position() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t hidden_size() const = 0;
  /// The host-side embedding of `tokens`, [tokens.size(), hidden] row-major.
  virtual Status embed(const std::vector<int32_t>& tokens, std::vector<float>* out) const = 0;
  /// Keep every node's value from the following forward calls (for per-layer comparisons).
  virtual void set_keep_activations(bool keep) = 0;
  /// The value of `node` from the last forward call, row-major, with its shape.
  virtual Status activation(const std::string& node, std::vector<float>* out,
                            std::vector<int64_t>* shape) const = 0;
};

}  // namespace qbc::runner
