// Scoring a text as the runtime runs a reply: the prompt in one call (the prefill programs),
// then each later token in its own call (the decode programs), teacher-forced. With a second
// weight image per phase (bit.prefill / bit.decode, docs/quantization.md "Precision per
// phase") the prompt's logits come from one image and the generated tokens' from the other,
// as in a real run; `qbc eval --as-reply` scores that way.
#pragma once

#include <cstdint>
#include <vector>

#include "qbc/runner/runner.h"
#include "qbc/support/status.h"

namespace qbc::runner {

/// The logits [tokens, vocab] of `tokens` run on `r` (from its current position) as tokens
/// [0, prompt) in one forward call and each later token in a call of its own.
/// kInvalidArgument when prompt is not in [1, tokens.size()]; the runner's errors otherwise,
/// naming the token.
Status forward_as_reply(Runner& r, const std::vector<int32_t>& tokens, int64_t prompt,
                        std::vector<float>* logits);

/// A perplexity chunk scored from position `first` (the logits at first ... size - 2) as a
/// reply: tokens [0, first] in one call, then each later token up to the last scored position
/// in its own call (the chunk's last token, whose logits are never scored, is not run);
/// `logits` gets [chunk.size() - 1, vocab].
Status forward_chunk_as_reply(Runner& r, const std::vector<int32_t>& chunk, int64_t first,
                              std::vector<float>* logits);

}  // namespace qbc::runner
