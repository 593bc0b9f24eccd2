// `qbc eval MODEL.mxq --reference FOLDER --images DIR` (docs/multimodal.md "Accuracy on
// image-text pairs"): a compiled VLM against its float HF folder on image-text pairs, each pair
// run as `qbc run --image` runs it. Per pair: the SQNR of the image's feature rows (the MXQ's
// vision part against the float tower and projector, both as spliced into the language model),
// and the text after the image scored by both language models (mean KLD, top-1 agreement, the
// log-likelihood of the text under each).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/driver/vision_block_error.h"
#include "qbc/runtime/generator.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// One pair of an --images folder: an image (PNG or JPEG) and the text file of the same stem
/// beside it (`photo.jpg` and `photo.txt`), the text that follows the image in the prompt.
struct ImageTextPair {
  std::string image, text_file;
};

/// The pairs of `dir`, sorted by image name. kNotFound for a missing folder; kInvalidArgument
/// naming the folder when it has no image, and naming the first image without its .txt.
StatusOr<std::vector<ImageTextPair>> list_image_text_pairs(const std::string& dir);

/// What one pair measured.
struct ImagePairScore {
  std::string image;
  int64_t prompt_tokens = 0;   ///< the expanded prompt: marks, image tokens, text
  int64_t image_tokens = 0;    ///< rows spliced
  int64_t scored = 0;          ///< text tokens after the image span, each predicted by both
  double feature_sqnr_db = 0;  ///< 10·log10(Σ ref² / Σ (ref − test)²) over the image's rows
  /// Qwen3-VL: the same over each DeepStack level's rows (empty for other families)
  std::vector<double> deepstack_sqnr_db;
  double kld_mean = 0;                ///< mean KL(P_ref ‖ P_test) over the scored tokens, nats
  double top1 = 0;                    ///< fraction of scored positions with the same argmax
  double nll = 0, nll_reference = 0;  ///< mean negative log-likelihood of the text
};

/// All pairs, and the totals over every scored token (KLD, top-1, perplexity of each model)
/// and every feature value (SQNR).
struct ImageEvalReport {
  std::string model, reference;
  std::vector<ImagePairScore> pairs;
  int64_t scored = 0;
  double feature_sqnr_db = 0, kld_mean = 0, kld_p99 = 0, top1 = 0;
  std::vector<double> deepstack_sqnr_db;  ///< per DeepStack level, over every image
  /// The tower's SQNR per block as the compile measured it on its calibration samples (the
  /// file's calibration record; the compiled program keeps no per-block values), and on how many
  /// tower calls (an Idefics3 view is one). Empty for a file without the record.
  std::vector<TowerBlockError> tower_blocks;
  int64_t tower_block_samples = 0;
  double ppl = 0, ppl_reference = 0;
  double seconds = 0;
};

/// Scores `pairs` on the compiled VLM `test` (its vision part and language model on the
/// executor) against the float VLM folder `reference` (the float tower through the folder's
/// preprocessing, the float language model on LibTorch). Each prompt is the pair's text with
/// the image mark where `qbc run --image` puts it (at the start unless the text holds one),
/// expanded to the image's tokens; M-RoPE models take their 3-stream positions and Gemma 3 its
/// bidirectional image span on both sides. kInvalidArgument when `test` has no vision part or
/// a prompt does not fit either model's context, naming the pair.
StatusOr<ImageEvalReport> eval_image_pairs(runtime::Generator& test, const std::string& model,
                                           const std::string& reference,
                                           const config::ResolvedConfig& cfg,
                                           const std::vector<ImageTextPair>& pairs, int threads);

/// The report as a table (one row per pair, then the totals) and as JSON.
std::string format_image_eval(const ImageEvalReport& r);
std::string image_eval_json(const ImageEvalReport& r);

}  // namespace qbc::driver
