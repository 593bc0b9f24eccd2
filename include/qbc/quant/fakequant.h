// The fake-quant evaluator: the executable specification of the NPU's integer
// numerics (docs/numerics.md). It runs an MBLT graph, quantized or not, with plain
// C++ loops: integer matmuls for `qlinear` and quantized attention, fp16 values
// between ops, fp32/fp64 arithmetic inside an op exactly as the spec names it.
// Single-threaded and deterministic: every reduction runs in index order. The per-op
// kernels and scalar rules are in qbc/numerics/; this is the graph-walking part.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "qbc/ir/graph.h"
#include "qbc/ir/weight_reader.h"
#include "qbc/runner/runner.h"
#include "qbc/support/status.h"

namespace qbc::quant {

/// A copy of one attention node's KV cache.
struct KvCacheSnapshot {
  bool quantized = false;  ///< True when the node has `k_bits` (integer cache).
  int64_t tokens = 0;      ///< Cached positions.
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  /// Quantized caches: the integer codes, [tokens, kv_heads * head_dim] row-major.
  std::vector<int32_t> k_codes, v_codes;
  /// Float caches: the fp16 values (as float), same layout.
  std::vector<float> k_values, v_values;
};

/// Runs an MBLT graph with the integer/fp16 numerics of docs/numerics.md (batch 1),
/// token by token with a KV cache per attention node. Implements runner::Runner, so
/// perplexity, generation and accuracy reports run on it like on ref::Session.
///
/// Value rules: `inputs_embeds` is rounded to fp16 at the boundary; body ops produce
/// fp16 values; nodes of the head part keep fp32 (logits leave unrounded), except a
/// `qlinear` whose `out_fp16` attribute decides. Because activation scales are static,
/// each token's computation does not depend on how tokens are batched: a prompt run at
/// once and the same prompt run token by token give bitwise identical logits (unless a
/// rope node switches frequencies by sequence length, as dynamic NTK and LongRoPE do).
class FakeQuantSession final : public runner::Runner {
 public:
  /// Loads every weight of `g` through `weights` (integer weights arrive as exact
  /// integer-valued floats) and prepares empty caches. Errors name the node or weight.
  static StatusOr<std::unique_ptr<FakeQuantSession>> create(const ir::Graph& g,
                                                            const ir::WeightReader& weights);
  ~FakeQuantSession() override;

  Status forward(const std::vector<int32_t>& tokens, std::vector<float>* logits) override;
  Status forward_embeds(const std::vector<float>& embeds, int64_t seq,
                        std::vector<float>* logits) override;
  /// forward_embeds of a call that is one bidirectional span (Gemma 3's image tokens: HF's
  /// token-type or-mask, prefill only): every attention lets each row see the call's later keys
  /// too (numerics::attention's `span`). A span longer than one call cannot be bidirectional:
  /// the caller gives the whole span in one call.
  Status forward_embeds_span(const std::vector<float>& embeds, int64_t seq,
                             std::vector<float>* logits);
  /// M-RoPE graphs (inputs rope_cos, rope_sin): `seq` tokens at explicit 3-stream positions,
  /// stream-major [3, seq] (runner::mrope_positions); the tables are computed in fp64, rounded
  /// to fp32 (the graph's inputs) and to fp16 at the boundary. Later calls without positions
  /// continue at the largest position + 1; forward and forward_embeds use text positions
  /// (cache position plus that delta in all three streams). kFailedPrecondition on other graphs.
  Status forward_embeds_mrope(const std::vector<float>& embeds, int64_t seq,
                              const std::vector<int64_t>& positions, std::vector<float>* logits);
  /// A graph without token positions (a vision tower, docs/multimodal.md): one float
  /// vector per graph input in graph order, each rows x its last dim with the same rows,
  /// rounded to fp16 at the boundary; `out` receives the output, or the outputs side by side
  /// per row (Qwen3-VL: the features, then each DeepStack level's). failed_precondition
  /// on a decoder graph.
  Status forward_inputs(const std::vector<std::vector<float>>& inputs, std::vector<float>* out);
  /// As ref::Session::set_deepstack: Qwen3-VL's DeepStack rows for the next forward call (fp16
  /// at the NPU boundary, as every input); zeros without them.
  Status set_deepstack(std::vector<std::vector<float>> rows);
  void reset() override;
  int64_t position() const override;
  int64_t vocab_size() const override;
  int64_t hidden_size() const override;
  Status embed(const std::vector<int32_t>& tokens, std::vector<float>* out) const override;
  void set_keep_activations(bool keep) override;
  /// Keeps the values of `nodes` alone from the following forward calls (a comparison of a
  /// few nodes of a large graph, without a copy of every activation); set_keep_activations
  /// resets it. kInvalidArgument for an empty set, kNotFound naming a node the graph lacks.
  Status keep_activations_of(std::set<std::string> nodes);
  Status activation(const std::string& node, std::vector<float>* out,
                    std::vector<int64_t>* shape) const override;

  /// The KV cache of attention node `node` (kNotFound for other names), for tests
  /// and for comparing a backend's cache contents bit for bit.
  Status kv_cache(const std::string& node, KvCacheSnapshot* out) const;

 private:
  FakeQuantSession();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qbc::quant
