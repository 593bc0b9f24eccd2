// Scoring a text as the runtime runs a reply (see qbc/runner/reply_forward.h).
#include "qbc/runner/reply_forward.h"

#include <algorithm>

namespace qbc::runner {

Status forward_as_reply(Runner& r, const std::vector<int32_t>& tokens, int64_t prompt,
                        std::vector<float>* logits) {
  const auto n = static_cast<int64_t>(tokens.size());
  if (prompt < 1 || prompt > n)
    return invalid_argument("forward_as_reply: a prompt of ", prompt, " of ", n, " tokens");
  const std::vector<int32_t> head(tokens.begin(), tokens.begin() + prompt);
  QBC_RETURN_IF_ERROR(r.forward(head, logits).with_context("the prompt of ", prompt, " tokens"));
  const auto vocab = static_cast<size_t>(r.vocab_size());
  logits->resize(static_cast<size_t>(n) * vocab);
  std::vector<float> row;
  for (int64_t i = prompt; i < n; ++i) {
    QBC_RETURN_IF_ERROR(r.forward({tokens[static_cast<size_t>(i)]}, &row)
                            .with_context("token ", i, " of ", n, ", decoded alone"));
    if (row.size() != vocab)
      return internal_error("forward_as_reply: ", row.size(), " logits for one token of a ", vocab,
                            "-token vocabulary");
    std::copy(row.begin(), row.end(), logits->begin() + static_cast<int64_t>(i * vocab));
  }
  return ok_status();
}

Status forward_chunk_as_reply(Runner& r, const std::vector<int32_t>& chunk, int64_t first,
                              std::vector<float>* logits) {
  if (chunk.size() < 2)
    return invalid_argument("forward_chunk_as_reply: a chunk of ", chunk.size(), " tokens");
  const std::vector<int32_t> head(chunk.begin(), chunk.end() - 1);
  return forward_as_reply(r, head, first + 1, logits);
}

}  // namespace qbc::runner
