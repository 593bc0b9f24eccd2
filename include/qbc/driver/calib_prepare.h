// `qbc calib prepare`: calibration samples cut from a text file and embedded with the model's
// own table (calib/prepare.h), for a model the driver opens.
#pragma once

#include <cstdint>
#include <string>

#include "qbc/config/config.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// What to prepare and where (the command's arguments).
struct CalibPrepareRequest {
  std::string model;        ///< HF folder, .gguf or .mblt
  std::string text;         ///< --text: the text file windows are cut from
  std::string output;       ///< -o: the output folder
  int64_t num_samples = 0;  ///< 0: calibration.numSamples from the configuration
  int64_t seq_len = 0;      ///< 0: calibration.seqLength from the configuration
  bool force = false;       ///< replace a non-empty output folder
  std::string producer;     ///< recorded in provenance.json, e.g. "qbc 0.1.0 (abc123)"
  /// --images: a folder of PNG / JPEG images (a VLM folder): each sample holds one image's span
  /// (its float features, as the runtime splices them) after its first token.
  std::string images;
};

/// What prepare_calib wrote.
struct CalibPrepareResult {
  std::string output;
  int64_t samples = 0;
  int64_t seq_len = 0;
  int64_t hidden = 0;       ///< values per token (the embedding rows)
  int64_t text_tokens = 0;  ///< tokens in the text file
  uint64_t seed = 0;
  bool bos_replaced = false;  ///< each window starts with BOS
  int64_t images = 0;         ///< --images: the images used
  int64_t image_span = 0;     ///< --images: rows of each image span (ids around it included)
};

/// The cheap checks, before any configuration or model is read: the output folder may be
/// written (absent, empty, or --force), the text file exists and --images, when given, is a
/// folder with images. kInvalidArgument naming the folder, kNotFound naming the text file
/// (--text) or the image folder.
Status check_calib_prepare(const CalibPrepareRequest& r);

/// Opens the model, embeds `r.num_samples` windows of `r.seq_len` tokens of the text (the
/// configuration's calibration.numSamples / seqLength / seed when not given) with its host
/// embedding table and writes the folder (calib::prepare_calib_dir). kUnimplemented for a model
/// without exactly one float input; kInvalidArgument when the embedding rows do not match it.
StatusOr<CalibPrepareResult> prepare_calib(const CalibPrepareRequest& r,
                                           const config::ResolvedConfig& cfg);

/// The result as the "calib-prepare" result event's JSON and as the line the command prints.
std::string calib_prepare_json(const CalibPrepareResult& r);
std::string calib_prepare_text(const CalibPrepareResult& r);

}  // namespace qbc::driver
