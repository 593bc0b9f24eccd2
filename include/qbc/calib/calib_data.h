// Calibration inputs: the sample files the vendor toolchain accepts, validated before any work,
// and seeded random samples for smoke tests.
//
// Accepted paths (config `calibDataPaths`, concatenated in order):
//  - a folder of .npy files: listed by `npy_files.txt` in it when present, else every *.npy in
//    byte-wise sorted name order; a folder with an `inputs.json` is that JSON map (below);
//  - a .txt file listing .npy paths, one per line (relative paths resolve against the .txt's
//    folder; blank lines and lines starting with '#' are ignored);
//  - a .json map for multi-input models, `{"inputs_embeds": [paths...], ...}`, matched to the
//    model's input names (not positions); a value may also be a folder or .txt list. Optional
//    inputs (Qwen3-VL's `deepstack.J`, zero when absent) may be left out;
//  - a single .npy file (one sample).
// Every sample must be a float array (f32, f16 or f64) of shape [1, seq, hidden] or
// [seq, hidden], seq >= 1, hidden equal to the model input's. Only headers are read when opening;
// each sample's data is loaded on demand, so memory stays bounded by one sample.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "qbc/calib/npy.h"
#include "qbc/ir/graph.h"
#include "qbc/support/random.h"
#include "qbc/support/status.h"

namespace qbc::calib {

/// A float model input that calibration samples feed.
struct CalibInputSpec {
  /// The graph input's name, e.g. "inputs_embeds".
  std::string name;
  /// The size of its last dimension.
  int64_t hidden = 0;
  /// Zero when a sample gives no file for it (Qwen3-VL's DeepStack rows: a text sample has
  /// none); a folder or .txt list feeds the one required input.
  bool optional = false;
};

/// The float inputs of `g` (kInput nodes of f32 type with a static last dimension), in graph
/// order. Integer inputs such as `positions`, and an M-RoPE graph's `rope_cos` / `rope_sin`
/// tables, are derived from the positions and excluded. DeepStack inputs are optional.
std::vector<CalibInputSpec> calib_input_specs(const ir::Graph& g);

/// A token-embedding table held in memory, [vocab, hidden] row-major. Pure table lookup: any
/// embedding scale is applied by the graph.
struct EmbeddingTable {
  /// vocab * hidden floats.
  std::vector<float> data;
  /// Number of rows.
  int64_t vocab = 0;
  /// Row length.
  int64_t hidden = 0;

  /// Replaces `*out` with the rows of `tokens`, [tokens.size(), hidden]. kInvalidArgument naming
  /// the first token id outside [0, vocab).
  Status embed(const std::vector<int32_t>& tokens, std::vector<float>* out) const;
};

/// The graph's host embedding weight (role kHostEmbedding). kInvalidArgument when there is none
/// or it is not [vocab, hidden].
StatusOr<const ir::Weight*> find_host_embedding(const ir::Graph& g);

/// One input of one sample.
struct CalibSampleInput {
  /// The .npy file (as resolved: relative list entries are joined to their list's folder).
  std::filesystem::path path;
  /// Sequence length from the header.
  int64_t seq = 0;
  /// Element type from the header.
  NpyDtype dtype = NpyDtype::kF32;
};

/// One calibration sample: a file per model input.
struct CalibSample {
  /// Input name -> file.
  std::map<std::string, CalibSampleInput> inputs;
};

/// A validated set of calibration samples. Cheap to copy (shares its state), so it can be
/// captured by a sample callback. Either file-backed (open_calib_inputs) or generated
/// (make_random_calib).
class CalibDataset {
 public:
  CalibDataset();

  /// Number of samples.
  size_t size() const;
  /// The model inputs the samples feed.
  const std::vector<CalibInputSpec>& inputs() const;
  /// The files of each sample; empty for a generated dataset.
  const std::vector<CalibSample>& samples() const;
  /// True for a make_random_calib() dataset.
  bool is_random() const;

  /// Whether sample `i` has a file for `input` (an optional input may have none: zeros).
  bool has_input(size_t i, const std::string& input) const;
  /// Loads sample `i` of the first required (for LLMs, the only) input as float32 [seq, hidden]
  /// row-major. Errors name the file: it may have changed since it was opened, and non-finite
  /// values are rejected.
  Status load(size_t i, std::vector<float>* data, int64_t* seq) const;
  /// The same for the input called `input`; kNotFound when the model has no such input.
  Status load_input(size_t i, const std::string& input, std::vector<float>* data,
                    int64_t* seq) const;

  struct State;  ///< Shared, immutable after construction.
  /// Internal: wraps a built state.
  explicit CalibDataset(std::shared_ptr<const State> state);

 private:
  std::shared_ptr<const State> state_;
};

/// Opens every calibration path, reading only .npy headers, and checks every file against
/// `inputs` (non-empty). kInvalidArgument / kNotFound / kDataLoss naming the file at fault and,
/// for a shape mismatch, the expected shape, e.g. "calib/sample_3.npy: shape [1, 512, 128] does
/// not match the model's inputs_embeds [1, seq, 64]". Folders and .txt lists need a model with
/// exactly one float input; a JSON map must name every input and nothing else, with the same
/// number of samples per input. An empty folder or list is an error.
StatusOr<CalibDataset> open_calib_inputs(const std::vector<std::string>& paths,
                                         const std::vector<CalibInputSpec>& inputs);

/// `num_samples` samples of `seq_len` tokens, generated on demand: sample i's token ids come from
/// splitmix64 seeded by (`seed`, i), uniform over [0, table.vocab), the first replaced by
/// `bos_id` when it is >= 0, then embedded with `table`. Same seed, same data, on every machine.
/// For smoke tests only (useRandomCalib). kInvalidArgument for a non-positive count or length or
/// an empty table.
StatusOr<CalibDataset> make_random_calib(std::shared_ptr<const EmbeddingTable> table,
                                         const std::string& input_name, size_t num_samples,
                                         int64_t seq_len, uint64_t seed, int32_t bos_id = -1);

/// The portable generator of seeded choices (support/random.h).
using ::qbc::splitmix64;

}  // namespace qbc::calib
