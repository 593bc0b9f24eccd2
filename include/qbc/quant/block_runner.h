// Runs a float graph block by block over a calibration set: the graph is cut into
// segments (block 0 with whatever precedes it, each further block, the head), and every
// sample's residual stream is carried from one segment to the next. Only one segment's
// weights are loaded at a time, so calibration, GPTQ and weight-scale search stay at
// one decoder block of memory however large the model is.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "qbc/ir/graph.h"
#include "qbc/ir/weight_reader.h"
#include "qbc/quant/calibrate.h"
#include "qbc/ref/session.h"
#include "qbc/support/status.h"

namespace qbc::quant {

class BlockRunner {
 public:
  /// Cuts `g` into segments and loads every sample's embeddings (n samples). Errors name
  /// the node when the graph is not a chain of blocks joined by one residual stream.
  /// With `deepstack` (a graph with DeepStack inputs), each sample's DeepStack rows are loaded
  /// too (kept as fp16, the NPU's precision for them) and given to the segments that read them;
  /// without, those inputs are zero. kInvalidArgument for DeepStack inputs not named
  /// deepstack.0 .. deepstack.{L-1}, naming the input.
  static StatusOr<BlockRunner> create(const ir::Graph& g, size_t n, const SampleSource& samples,
                                      const ref::SessionOptions& session = {},
                                      const DeepStackSource* deepstack = nullptr);

  size_t num_segments() const { return segments_.size(); }
  size_t num_samples() const { return stream_.size(); }
  /// Segment `s` as a graph of its own (an f32 input named like the residual value it
  /// replaces, the positions input, its nodes and their weights, one output).
  const ir::Graph& segment(size_t s) const { return graphs_[s]; }
  /// Names of the nodes of segment `s` (in the full graph's order).
  std::vector<std::string> node_names(size_t s) const;

  /// Called after each sample's forward pass with the session (activations kept).
  using Visitor = std::function<Status(size_t sample, ref::Session& session)>;
  /// Runs segment `s` (which must be the current one: segments go in order) with
  /// `weights` on every sample's current stream and calls `visit` after each. With
  /// `keep_outputs`, the outputs are kept for advance_from_last_run().
  Status run(size_t s, const ir::WeightReader& weights, const Visitor& visit,
             bool keep_outputs = false);
  /// As run(), but only what computes the nodes named `needed` (their ancestors in segment
  /// `s`): the visitor may read their activations and their ancestors'. The values are those
  /// run() gives (the same nodes on the same inputs); the nodes after them are not run (GPTQ's
  /// first groups of a block need its first nodes only). kNotFound names a node not in `s`.
  Status run_prefix(size_t s, const std::vector<std::string>& needed,
                    const ir::WeightReader& weights, const Visitor& visit);
  /// Makes the outputs of the last run(s, ..., keep_outputs = true) the next segment's
  /// stream, without running the segment again (kInternal when segment `s` kept none: outputs
  /// kept for an earlier segment are dropped when it advances).
  Status advance_from_last_run(size_t s);
  /// Runs segment `s` once more with `weights` and makes its outputs the stream the next
  /// segment reads (call once per segment, after the last run()).
  Status advance(size_t s, const ir::WeightReader& weights);

  /// Every sample's current stream (the input of the current segment) and its length.
  const std::vector<std::vector<float>>& stream() const { return stream_; }
  const std::vector<int64_t>& seqs() const { return seqs_; }
  /// The current segment.
  size_t current() const { return current_; }
  /// A digest of every sample's DeepStack rows ("" when there are none), for checkpoint keys.
  const std::string& deepstack_digest() const { return deepstack_digest_; }
  /// Continues at segment `s` with `stream` as its input (a checkpoint of an earlier run:
  /// what advancing through segments [0, s) made). Must be called before any run().
  Status resume_at(size_t s, std::vector<std::vector<float>> stream);

 private:
  struct Segment {
    std::vector<ir::ValueId> nodes;
    ir::ValueId input = -1, output = -1;
    std::vector<int64_t> deepstack_levels;  ///< The DeepStack inputs it reads, in its order.
  };
  /// A sample's rows of one DeepStack level: its rows [first, first + rows/hidden) as fp16 bits,
  /// the precision the NPU takes them in (the rest, outside an image, are zero and not kept).
  struct HostRows {
    int64_t first = 0;
    std::vector<uint16_t> rows;
  };
  BlockRunner() = default;
  /// Gives segment `s`'s DeepStack inputs sample `i`'s rows (none: the session's zeros).
  Status feed_deepstack(size_t s, size_t i, ref::Session& session) const;
  /// run() and run_prefix(): `graph` (segment `s` or a prefix of it) on every sample's stream,
  /// `visit` after each; with `keep`, the outputs kept for advance_from_last_run().
  Status run_graph(size_t s, const ir::Graph& graph, const ir::WeightReader& weights,
                   const Visitor& visit, bool keep);
  std::vector<Segment> segments_;
  std::vector<ir::Graph> graphs_;
  std::vector<std::string> full_names_;  // node names of the full graph, by ValueId
  std::vector<std::vector<float>> stream_, kept_outputs_;
  size_t kept_segment_ = static_cast<size_t>(-1);  ///< The segment kept_outputs_ came from.
  std::vector<int64_t> seqs_;
  std::vector<std::vector<HostRows>> deepstack_;  ///< Per sample, per level; empty: none.
  int64_t hidden_ = 0;
  std::string deepstack_digest_;
  ref::SessionOptions session_;
  size_t current_ = 0;
};

}  // namespace qbc::quant
