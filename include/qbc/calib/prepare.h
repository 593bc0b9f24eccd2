// Preparing calibration data from text (`qbc calib prepare`): tokenize a text file with the
// model's tokenizer, cut seeded windows of seq_len tokens, embed them with the model's host
// embedding table, and write a folder the calibration readers (calib_data.h) and the vendor
// toolchain accept:
//
//   DIR/sample_0000.npy ...   float32 [1, seq_len, hidden], C order
//   DIR/npy_files.txt         the sample files in order, one per line
//   DIR/provenance.json       model files and hashes, text hash, tokenizer, seed, offsets
//                             (and with images: the image of each sample and its span rows)
//
// With inputs an image span carries besides the embeddings (Qwen3-VL's DeepStack rows), each
// such input gets a folder of its own, DIR/<input>/sample_0000.npy ... [1, seq_len, hidden]
// (the span's rows where the image is, zeros elsewhere) with its npy_files.txt, and
// DIR/inputs.json maps every input to its list (calib_data.h reads the folder through it).
//
// The output is a pure function of the inputs (no timestamps), so two runs with the same
// arguments give byte-identical files. It is written to a temporary folder beside DIR and
// renamed at the end: a failure leaves nothing behind.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "qbc/calib/calib_data.h"
#include "qbc/ir/graph.h"
#include "qbc/support/status.h"
#include "qbc/tokenizer/tokenizer.h"

namespace qbc::calib {

/// What to prepare and where.
struct PrepareOptions {
  /// The text file to cut windows from.
  std::filesystem::path text_path;
  /// The output folder; must be absent or empty unless `force`.
  std::filesystem::path out_dir;
  /// Number of windows (samples), >= 1.
  int64_t num_samples = 128;
  /// Tokens per window, >= 1.
  int64_t seq_len = 512;
  /// Seeds the window offsets.
  uint64_t seed = 0;
  /// Replace a non-empty `out_dir`.
  bool force = false;
  /// The graph input the samples feed (recorded in the provenance).
  std::string input_name = "inputs_embeds";
  /// Image-text calibration (a VLM): rows [n, hidden] of each image span as the runtime feeds
  /// them (the ids around the image embedded, the image's features between). Sample i holds
  /// span i mod size right after its first token, the window's text after it, cut to seq_len.
  std::vector<std::vector<float>> image_spans;
  /// Where each span came from (provenance), one per span.
  std::vector<std::string> image_names;
  /// Further graph inputs an image span carries (Qwen3-VL: "deepstack.0", ...), and for each
  /// span one block per input, as many rows as the span (zeros at its text rows).
  std::vector<std::string> span_input_names;
  std::vector<std::vector<std::vector<float>>> span_inputs;
};

/// What the caller knows about the model, recorded in provenance.json.
struct PrepareProvenance {
  /// The model argument as given (HF folder, .gguf or .mblt).
  std::string model;
  /// The graph's provenance: source model path, format and files with hashes.
  std::string source_path;
  std::string source_format;
  std::vector<ir::SourceFile> files;
  /// The tokenizer file used.
  std::string tokenizer_path;
  /// The producing tool and version, e.g. "qbc 0.1.0 (abc123)".
  std::string producer;
};

/// What prepare_calib_dir() did.
struct PrepareResult {
  /// Tokens in the text (including a BOS the tokenizer prepends).
  int64_t num_tokens = 0;
  /// Start offset of each window in the token sequence.
  std::vector<int64_t> offsets;
  /// Whether the first token of each window was replaced by BOS.
  bool bos_replaced = false;
  /// Paths of the written sample files, in order.
  std::vector<std::filesystem::path> files;
  /// With image spans: the span (index into PrepareOptions::image_spans) of each sample.
  std::vector<int64_t> image_of_sample;
};

/// `num_samples` window start offsets in [0, num_tokens - seq_len], drawn with splitmix64 from
/// `seed` (same offsets on every machine; windows may overlap). Requires num_tokens >= seq_len.
std::vector<int64_t> pick_window_offsets(int64_t num_tokens, int64_t seq_len, int64_t num_samples,
                                         uint64_t seed);

/// Checks that `dir` may be written: it is absent, an empty folder, or `force` is set (and it is a
/// folder). kInvalidArgument naming it otherwise. Cheap; call it before loading a model.
Status check_output_dir(const std::filesystem::path& dir, bool force);

/// Tokenizes the text (BOS when the tokenizer adds one by default), picks the windows, replaces
/// each window's first token by BOS when the tokenizer adds BOS (as llama.cpp's perplexity
/// does), embeds them with `table` and writes the folder described above. Reports
/// events::progress("calib", i, n). Errors name the file: kNotFound for a missing text file,
/// kInvalidArgument when it has fewer than seq_len tokens (giving the count), for bad options, a
/// non-empty output folder without `force`, or a table whose vocabulary is smaller than the
/// tokenizer's ids.
StatusOr<PrepareResult> prepare_calib_dir(const PrepareOptions& options,
                                          const tokenizer::Tokenizer& tokenizer,
                                          const EmbeddingTable& table,
                                          const PrepareProvenance& provenance);

}  // namespace qbc::calib
