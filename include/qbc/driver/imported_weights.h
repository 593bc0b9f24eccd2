// Pre-quantized checkpoints in the quantize stage: which imported linears keep their integer
// codes and scales as qbc weights, which are re-quantized and why, and the weight-changing
// passes that must not run on kept codes (docs/frontend.md, "Pre-quantized HF checkpoints").
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/driver/model_loader.h"
#include "qbc/quant/pass.h"
#include "qbc/quant/quantize.h"

namespace qbc::driver {

/// What happened to one kind of imported linear ("self_attn.q_proj", "mlp.down_proj").
struct ImportedKind {
  std::string kind;
  int imported = 0;
  int kept = 0;
  /// Why the others were re-quantized (or left in float), with counts.
  std::map<std::string, int> why_not;
};

/// An act-order linear whose codes are kept as a column permutation: its columns are put in
/// group order (new column j is checkpoint column `perm[j]`, so its groups are contiguous), and
/// its input is permuted the same way by permuting the output rows of the linears that make it
/// (the gate and up of a gated MLP whose product only this linear reads).
struct ColumnPermutation {
  /// The act-order linear's weight (columns permuted).
  std::string weight;
  /// The weights and biases of the linears before it (rows permuted).
  std::vector<std::string> row_weights;
  std::vector<int64_t> perm;
};

/// The imported linears of a pre-quantized checkpoint and the codes kept from them.
struct ImportedWeights {
  /// PrequantConfig::describe().
  std::string config;
  std::vector<ImportedKind> kinds;
  /// Passes turned off because they would change kept codes.
  std::vector<std::string> skipped_passes;
  /// What the checkpoint's kv_cache_scheme became (empty when it has none).
  std::string kv_note;
  /// The kept codes by linear node name (FixedWeights::imported).
  quant::FixedWeightMap fixed;
  /// Act-order linears kept as a column permutation, and the float weights that permutation
  /// rewrites (applied to the quantize run's weights by permute_act_order_inputs).
  std::vector<ColumnPermutation> permutations;
  /// Act-order linears (a non-trivial g_idx) dequantized and re-quantized instead.
  int act_order_requantized = 0;

  int imported() const;
  int kept() const;
  /// One line: "gptq (...): codes kept 14 of 14 (self_attn.q_proj 2 of 2, ...)".
  std::string summary_text() const;
  /// The same as a JSON object (the MBLT's "qbc.imported_weights" metadata).
  std::string json() const;
};

/// The imported linears of `model` under `options` (nullopt when the source is not a
/// pre-quantized checkpoint). A linear keeps its codes when qbc's weight format holds them
/// exactly: contiguous groups (an act-order g_idx only when its groups are whole and the graph
/// can permute the linear's input, see ColumnPermutation), 2 to 8 bits (stored as 4 or 8), zero
/// points inside the code range, |scale| >= 1e-8, and a recipe that does not keep the layer in
/// float. Errors are the reader's (file, tensor).
StatusOr<std::optional<ImportedWeights>> imported_weights(const LoadedModel& model,
                                                          const config::CompileOptions& options);

/// Applies `iw.permutations` to the float weights of the quantize run (`ctx.weights`, moving
/// each rewritten weight to the sidecar), so the graph computes the same function with the
/// act-order linears' columns in group order. Errors name the weight.
Status permute_act_order_inputs(const ImportedWeights& iw, quant::PassContext& ctx);

/// `options` with every pass that changes weights turned off (spinR1/R2, normConv, qkRotation,
/// qk/vo/ud/normSmooth, searchWeightScale, hessianQuant), recording the ones that were on in
/// `iw.skipped_passes`. Activation and KV calibration are unaffected.
config::CompileOptions without_weight_passes(const config::CompileOptions& options,
                                             ImportedWeights& iw);

}  // namespace qbc::driver
