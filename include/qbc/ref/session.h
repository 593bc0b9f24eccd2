// The float reference runtime: executes an MBLT graph with LibTorch on the CPU,
// a whole prompt at once (prefill) and then token by token with a KV cache.
// It is the trusted reference every later stage is compared against. No
// LibTorch type appears in this header.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qbc/ir/graph.h"
#include "qbc/ir/weight_reader.h"
#include "qbc/runner/runner.h"
#include "qbc/support/status.h"

namespace qbc::ref {

/// Options of a session.
struct SessionOptions {
  /// Compute in float64 instead of float32 (for equivalence tests of transforms).
  bool float64 = false;
  /// Intra-op threads; 0 = LibTorch's default.
  int threads = 0;
};

/// The float reference runtime (LibTorch): the loaded weights and the KV caches.
///
/// LibTorch lives in a plugin (libqbc_ref_torch.so) that create() loads on first
/// use, so commands that never compute with tensors (parse, inspect, dump-config)
/// start without loading LibTorch.
// Not `final`: calls through Session pointers must stay virtual, because the
// implementation lives in the plugin and the qbc binary does not link it.
class Session : public runner::Runner {
 public:
  /// Loads every weight of `g` through `weights` and prepares empty caches.
  /// Errors name the weight or node at fault; quantized nodes are refused.
  /// kInternal when the LibTorch plugin cannot be loaded (the message says where it looked).
  static StatusOr<std::unique_ptr<Session>> create(const ir::Graph& g,
                                                   const ir::WeightReader& weights,
                                                   const SessionOptions& options = {});
  /// The same, inside the plugin (called by create() through the plugin's entry point).
  static StatusOr<std::unique_ptr<Session>> create_in_plugin(const ir::Graph& g,
                                                             const ir::WeightReader& weights,
                                                             const SessionOptions& options);
  ~Session() override;

  Status forward(const std::vector<int32_t>& tokens, std::vector<float>* logits) override;
  Status forward_embeds(const std::vector<float>& embeds, int64_t seq,
                        std::vector<float>* logits) override;
  /// forward_embeds of a call that is one bidirectional span (Gemma 3's image tokens: every
  /// row also sees the call's later tokens; numerics::attention's `span` rule).
  virtual Status forward_embeds_span(const std::vector<float>& embeds, int64_t seq,
                                     std::vector<float>* logits);
  /// forward_embeds for a language graph with M-RoPE inputs (rope_cos, rope_sin: Qwen2-VL,
  /// Qwen2.5-VL) at explicit 3-stream `positions`, stream-major [3, seq]
  /// (runner::mrope_positions); the session computes the tables. forward and forward_embeds on
  /// such a graph use text positions, the cache position + a delta in every stream; this call
  /// sets the delta so that the next token follows the largest position given (HF's
  /// rope_deltas), and reset() clears it. kFailedPrecondition on a graph without M-RoPE.
  virtual Status forward_embeds_mrope(const std::vector<float>& embeds, int64_t seq,
                                      const std::vector<int64_t>& positions,
                                      std::vector<float>* logits);
  /// Qwen3-VL's DeepStack rows for the next forward call only: one [seq, hidden] per input
  /// deepstack.J of the graph (the image's rows at its tokens, zero elsewhere); without them
  /// every such input is zero. kInvalidArgument when the count differs from the graph's.
  virtual Status set_deepstack(std::vector<std::vector<float>> rows);
  /// Runs a graph without token positions (a vision tower): one float vector per graph input,
  /// in graph order, each holding its input's static shape; `out` gets the output, or the
  /// outputs side by side per row (Qwen3-VL: the features, then each DeepStack level's).
  /// kFailedPrecondition on a language graph.
  virtual Status forward_inputs(const std::vector<std::vector<float>>& inputs,
                                std::vector<float>* out);
  void reset() override;
  int64_t position() const override;
  int64_t vocab_size() const override;
  int64_t hidden_size() const override;
  Status embed(const std::vector<int32_t>& tokens, std::vector<float>* out) const override;
  void set_keep_activations(bool keep) override;
  Status activation(const std::string& node, std::vector<float>* out,
                    std::vector<int64_t>* shape) const override;

 private:
  Session();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace qbc::ref
