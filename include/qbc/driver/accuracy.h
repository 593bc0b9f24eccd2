// The accuracy report: a model (usually quantized) against a float reference
// on the same token stream (llama.cpp's perplexity chunks).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qbc/ref/perplexity.h"
#include "qbc/runner/runner.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// Output error of one node, accumulated over the compared positions.
struct LayerError {
  std::string node;
  std::string op;
  int block = -1;
  double sqnr_db = 0;  ///< 10·log10(Σ ref² / Σ (ref − test)²); +inf when identical.
  /// The basis the two outputs are compared in: "model" (as both graphs compute it) or
  /// "residual, R1 undone" (the test's value rotated back by spinR1's R1ᵀ first).
  std::string basis = "model";
  bool undo_spin_r1 = false;  ///< apply CompareOptions::undo_spin_r1 to the test's value
};

/// A node left out of the per-layer table: a transform changed its output's basis.
struct LayerLeftOut {
  std::string node;
  std::string passes;  ///< "qk, qkRotation"
};

/// What compare_models() measured.
struct AccuracyReport {
  int64_t ctx = 0;
  int64_t chunks = 0;
  int64_t tokens_scored = 0;
  double ppl = 0;            ///< Of the tested model.
  double ppl_reference = 0;  ///< Of the reference.
  double kld_mean = 0;       ///< Mean KL(P_ref ‖ P_test), nats.
  double kld_p99 = 0;        ///< 99th percentile.
  double kld_max = 0;
  double top1 = 0;                            ///< Fraction of positions with the same argmax.
  std::vector<LayerError> layers;             ///< Block outputs and projections, in graph order.
  std::vector<LayerLeftOut> layers_left_out;  ///< Not comparable (re-based outputs).
  double seconds = 0;
};

/// Options of compare_models().
struct CompareOptions {
  int64_t ctx = 256;
  int64_t max_chunks = -1;   ///< -1 = all chunks of the text.
  int64_t layer_chunks = 4;  ///< Chunks used for the per-layer table (activations are large).
  /// Brings a test value of the rotated residual stream back to the reference's basis (for
  /// LayerError::undo_spin_r1 nodes; driver::select_layers makes it).
  std::function<Status(std::vector<float>*)> undo_spin_r1;
  /// The model's chunks run as a reply (ref::PerplexityOptions::as_reply); the reference's
  /// in one call each (a float model's numbers do not depend on it). No per-layer table.
  bool as_reply = false;
};

/// Runs `tokens` through both runners chunk by chunk (llama.cpp protocol: BOS
/// replaces each chunk's first token, the second half is scored) and compares
/// next-token distributions and per-node outputs. `nodes` are the node names
/// (with op and block) to report SQNR for; both graphs must have them.
StatusOr<AccuracyReport> compare_models(runner::Runner& test, runner::Runner& reference,
                                        const std::vector<int32_t>& tokens, int32_t bos_id,
                                        const std::vector<LayerError>& nodes,
                                        const CompareOptions& options);

/// Options of perplexity().
struct PerplexityRequest {
  int64_t ctx = 256;
  int64_t max_chunks = -1;    ///< -1 = all chunks of the text
  std::string logprobs_path;  ///< per-token log-probabilities to this file (empty: none)
  bool write_logits = false;  ///< with logprobs_path, the scored positions' logits too
  bool as_reply = false;      ///< ref::PerplexityOptions::as_reply
};
using ref::PerplexityResult;

/// llama-perplexity's protocol on `tokens` (ref::perplexity), reporting each chunk as an
/// "eval" progress event and the running perplexity in the debug log.
StatusOr<PerplexityResult> perplexity(runner::Runner& model, const std::vector<int32_t>& tokens,
                                      int32_t bos_id, const PerplexityRequest& request);

/// The log-softmax of the `n` logits `x`, in double.
void log_softmax(const float* x, int64_t n, std::vector<double>* out);

/// 10 · log10(signal / noise) in dB: the SQNR of values whose squares sum to `signal` against a
/// reference whose squared differences sum to `noise`; infinity when the noise is 0.
double sqnr_db(double signal, double noise);

/// Next-token distributions of a model and its reference compared position by position
/// (compare_models, `qbc eval --images`).
class TokenComparison {
 public:
  /// One position: the two rows of `vocab` logits and the token that followed (scored by both).
  void add(const float* test, const float* reference, int64_t vocab, int32_t next);
  int64_t count() const { return static_cast<int64_t>(klds_.size()); }
  double kld_mean() const;
  double kld_p99() const;  ///< sorted[min(n − 1, ⌊0.99 n⌋)]
  double kld_max() const;
  double top1() const;                 ///< fraction of positions whose argmax agree
  double nll() const { return nll_; }  ///< the sum of the test's −log p(next)
  double nll_reference() const { return nll_reference_; }

 private:
  std::vector<double> klds_;  ///< KL(P_ref ‖ P_test) per position, nats
  double nll_ = 0, nll_reference_ = 0;
  int64_t same_ = 0;
  std::vector<double> pt_, pr_;
};

/// The report as a human-readable table.
std::string format_report(const AccuracyReport& r);
/// The report as JSON.
std::string report_json(const AccuracyReport& r);

}  // namespace qbc::driver
