// A runner::Runner over a simulated device: one sequence on one instance slot. Tokens are
// embedded on the host (fp32 table, as the vendor's contract has it), rounded to fp16 into
// the slot's input buffer, run through the prefill program in calls of at most
// Bundle::chunk tokens (the decode program for a call of one token), and the fp32 logits
// are read back from the slot's output buffer. M-RoPE models also take per-token rope tables,
// which the session computes from the file's spec (Bundle::rope_inputs) before every call.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "qbc/runner/runner.h"
#include "qbc/runtime/device.h"
#include "qbc/support/status.h"

namespace qbc::runtime {

class NpuSession final : public runner::Runner {
 public:
  /// A session on instance `slot` of `device`. Checks the bundle's model interface: the
  /// input and output io buffers (fp16 [chunk, hidden], fp32 [chunk, vocab] per slot), the
  /// host embedding [embed_rows, hidden] and the programs' max_seq.
  static StatusOr<std::unique_ptr<NpuSession>> create(std::shared_ptr<Device> device, int slot = 0);

  /// Fails with kResourceExhausted naming max_cache when position + tokens exceed it.
  Status forward(const std::vector<int32_t>& tokens, std::vector<float>* logits) override;
  Status forward_embeds(const std::vector<float>& embeds, int64_t seq,
                        std::vector<float>* logits) override;
  /// M-RoPE models (Bundle::rope_inputs): `seq` tokens at explicit 3-stream positions,
  /// stream-major [3, seq] (runner::mrope_positions); later calls without positions continue
  /// at the largest position + 1 (HF's rope_deltas). kFailedPrecondition on other models.
  /// forward and forward_embeds on an M-RoPE model use text positions: cache position plus
  /// that delta in all three streams.
  Status forward_embeds_mrope(const std::vector<float>& embeds, int64_t seq,
                              const std::vector<int64_t>& positions, std::vector<float>* logits);
  /// `seq` tokens as one bidirectional span (a Gemma 3 image: every token sees every token of
  /// the call, and the window before the first; numerics::attention's span rule) in one call
  /// of the file's span program. kFailedPrecondition when the file has none, kInvalidArgument
  /// when seq exceeds the compiled chunk (a span cannot be split across calls).
  Status forward_embeds_span(const std::vector<float>& embeds, int64_t seq,
                             std::vector<float>* logits);
  /// Whether the file has span programs (then forward() runs every run of spliced rows as one
  /// span call).
  bool has_span_program() const;
  /// Sets the position to 0 (and the M-RoPE delta) and drops pending spliced rows and
  /// positions; cached
  /// entries past the position are never read again.
  void reset() override {
    position_ = 0;
    rope_delta_ = 0;
    clear_splice();
  }
  /// Rows that forward() uses instead of the embedding of the next occurrences of `token` (an
  /// image's features at its placeholder tokens), one row each, in order, until they are used
  /// up. With span programs (has_span_program) each run of consecutive tokens that take rows
  /// is one span call (forward_embeds_span), the text around it ordinary calls; a run longer
  /// than the chunk, or one split across forward() calls (a call that starts with a spliced
  /// row where the previous one ended with one), is kInvalidArgument before anything runs: the
  /// image would not attend to itself. `rows` is [n, image_row_width()]; kInvalidArgument
  /// otherwise or for a token outside the vocabulary. image_row_width() is hidden but on a model
  /// with DeepStack inputs (Bundle::deepstack, Qwen3-VL) each row is the feature row, then its
  /// DeepStack row of every level in order (the vision program's output row), written to the
  /// level's io buffer at the token that takes the row (zeros at every other token).
  Status splice(int32_t token, std::vector<float> rows);
  /// Values per spliced row: hidden times 1 + deepstack_levels().
  int64_t image_row_width() const;
  /// DeepStack levels of the model (Bundle::deepstack; 0: none).
  int64_t deepstack_levels() const;
  /// Spliced rows not used yet.
  int64_t rows_pending() const;
  /// M-RoPE models: the positions (stream-major [3, n], runner::mrope_positions) of the next n
  /// tokens forward() runs, consumed across calls like spliced rows (a call takes as many
  /// columns as it has tokens; one that has more tokens than columns left is kInvalidArgument).
  /// kFailedPrecondition on a model without M-RoPE.
  Status set_positions(std::vector<int64_t> positions);
  /// Position columns set_positions() gave that no call has used yet.
  int64_t positions_pending() const {
    return static_cast<int64_t>(positions_.size()) / 3 - positions_next_;
  }
  /// Whether the model takes M-RoPE tables (its positions are three streams).
  bool mrope() const;
  /// Drops pending spliced rows and positions.
  void clear_splice() {
    ended_in_span_ = false;
    splice_token_ = -1;
    splice_rows_.clear();
    splice_next_ = 0;
    positions_.clear();
    positions_next_ = 0;
  }
  /// Rewinds to `position` cached tokens (<= the current position: entries past it are
  /// never read again). kInvalidArgument when it is ahead of the cache, or when a
  /// sliding-window ring no longer holds the window before it (a ring of window + chunk
  /// positions allows rewinding up to `chunk` tokens once it has wrapped).
  Status rewind(int64_t position);
  int64_t position() const override { return position_; }
  int64_t vocab_size() const override;
  int64_t hidden_size() const override;
  Status embed(const std::vector<int32_t>& tokens, std::vector<float>* out) const override;
  /// Has no effect: per-node values exist only in the fake-quant evaluator.
  void set_keep_activations(bool keep) override {}
  /// kUnimplemented: per-node values exist only in the fake-quant evaluator.
  Status activation(const std::string& node, std::vector<float>* out,
                    std::vector<int64_t>* shape) const override;

  /// This sequence's KV cache as an opaque blob (docs/runtime.md "KV cache blobs"): every
  /// KV buffer of the slot, the position, and a digest of the model's KV layout.
  StatusOr<std::string> dump_kv() const;
  /// Loads a blob of dump_kv() (from any slot of a device of the same model): the cache and
  /// the position. kInvalidArgument when the blob is not one, is of another KV layout or
  /// has the wrong size; nothing is changed then.
  Status load_kv(std::string_view blob);
  /// The position a blob of dump_kv() holds, read from its header; -1 when it is too short or
  /// not one (load_kv says why).
  static int64_t kv_blob_position(std::string_view blob);

  Device& device() { return *device_; }
  int slot() const { return slot_; }

 private:
  NpuSession(std::shared_ptr<Device> device, int slot) : device_(std::move(device)), slot_(slot) {}
  /// One device call of `seq` <= chunk tokens from rows `embeds` [seq, hidden]; `mrope`, when
  /// not null, holds the call's 3-stream positions, stream-major [3, seq]. A call of one token
  /// runs the decode program unless it is a chunk of a longer prompt (`in_prompt`): a model
  /// with a second weight image per phase reads the decode image for generated tokens only,
  /// as the fake-quant evaluator does (one token per forward call).
  Status call(const float* embeds, int64_t seq, float* logits,
              const std::vector<int64_t>* mrope = nullptr, bool span = false,
              bool in_prompt = false);
  /// forward() on a model with span programs: `x` [seq, hidden] with the spliced rows at
  /// `spliced` (true per token) run as text calls and one span call per run of spliced rows.
  Status forward_spans(const std::vector<float>& x, const std::vector<bool>& spliced,
                       std::vector<float>* logits);
  /// Chunks of at most Bundle::chunk tokens; `mrope` as in call, [3, seq].
  Status run_chunks(const std::vector<float>& embeds, int64_t seq, std::vector<float>* logits,
                    const std::vector<int64_t>* mrope);
  /// M-RoPE models: the rope tables of the call's tokens into the slot's io buffers.
  Status write_rope_tables(int64_t seq, const std::vector<int64_t>* mrope);
  /// DeepStack models: the call's `seq` rows of every level into the slot's io buffers, from
  /// call_deepstack_ at token call_deepstack_at_ (zeros when it is empty), then advances it.
  Status write_deepstack(int64_t seq);

  std::shared_ptr<Device> device_;
  int slot_ = 0;
  int64_t position_ = 0;
  int64_t rope_delta_ = 0;          ///< M-RoPE: text positions are the cache position plus this
  int32_t splice_token_ = -1;       ///< splice(): the placeholder token, -1 for none
  std::vector<float> splice_rows_;  ///< [n, image_row_width()]
  /// forward(): the DeepStack rows of its tokens [seq, levels * hidden] (empty: zeros), read by
  /// its device calls in order from token call_deepstack_at_.
  std::vector<float> call_deepstack_;
  int64_t call_deepstack_at_ = 0;
  int64_t splice_next_ = 0;         ///< the next spliced row to use
  std::vector<int64_t> positions_;  ///< set_positions(): [3, n] stream-major
  int64_t positions_next_ = 0;      ///< the next position column to use
  bool ended_in_span_ = false;      ///< span programs: the last forward() ended on a spliced row
};

}  // namespace qbc::runtime
