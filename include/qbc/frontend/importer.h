// Builds the MBLT decoder graph of a model from its hyperparameters.
//
// The graph follows the vendor's contract: inputs `inputs_embeds [batch, seq,
// hidden]` and `positions [batch, seq]`, KV-cache state held by the attention
// nodes, the token-embedding table kept as a host-side weight, and the output
// head (final norm, lm_head, logit soft-capping) as its own part. Node names are
// stable and llama.cpp-like ("blk.3.attn.q_proj"); each carries its HF origin.
// With M-RoPE (HParams::mrope_section: Qwen2-VL, Qwen2.5-VL) the graph also takes
// `rope_cos`, `rope_sin [batch, seq, head_dim/2]`, computed on the host from the
// 3-stream positions (qbc/runner/mrope.h), and q/k go through `rope_table`; the
// metadata keys `mrope.section`, `mrope.theta`, `mrope.head_dim` say how to compute them.
#pragma once

#include <cstdint>

#include "qbc/frontend/hparams.h"
#include "qbc/ir/builder.h"
#include "qbc/ir/graph.h"
#include "qbc/support/status.h"

namespace qbc::frontend {

/// Options of the import that are not in config.json.
struct ImportOptions {
  /// KV-cache capacity compiled into every attention node (llm.attributes.maxCacheLength).
  int64_t max_cache_length = 4096;
};

/// Graph metadata of a Gemma 3 VLM's language graph: the tokens per image, which attend to each
/// other bidirectionally (HParams::image_span_tokens; the backend compiles span programs).
inline constexpr const char* kImageSpanMetadata = "attention.image_span";

/// The graph for `hp`, with every weight referring to its HF tensor name. The
/// result verifies. Weight shapes are those HF stores; the importer that reads
/// files checks the files against them.
StatusOr<ir::Graph> build_decoder_graph(const HParams& hp, const ImportOptions& options);

/// RoPE parameters of decoder layer `layer` (inverse frequencies with the
/// model's scaling applied, as HF computes them).
numerics::Rope rope_params(const HParams& hp, int64_t layer);

}  // namespace qbc::frontend
