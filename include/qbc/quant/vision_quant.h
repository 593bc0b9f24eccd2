// Quantization of a vision tower's feature graph (docs/multimodal.md "Vision quantization"):
// the vendor's recipe (W8A8, the patch embedding's and the projector output's inputs at 16
// bits, per-channel weight scales where a width is not a multiple of the group size),
// calibration by running float samples through the graph's own inputs (patch rows, rotary
// tables), then round-to-nearest quantization with static activation and attention scales.
#pragma once

#include <string>
#include <vector>

#include "compile_options.pb.h"
#include "qbc/ir/graph.h"
#include "qbc/ir/weight_reader.h"
#include "qbc/quant/calibrate.h"
#include "qbc/quant/quantize.h"
#include "qbc/ref/session.h"
#include "qbc/support/status.h"

namespace qbc::quant {

/// The linears whose input activations the recipe keeps at 16 bits: the patch embedding and
/// the projector's last linear (the vendor's `model_merger_fc2`), whose output is the image
/// feature the language model reads.
inline constexpr const char* kVisionActivation16[] = {"vis.patch_embed", "image_features"};

/// `base` with the vision recipe applied: every projection's weights and activations at 8 bits
/// (bit.transformer), 8-bit attention codes (bit.kvCache key / value), and
/// kVisionActivation16 appended to bit.layerOverrides.activation16Bits. The base's group
/// size, activation scaling, calibration and other layer overrides are kept (a user's
/// weight16Bits or activation16Bits glob on a `vis.*` node still applies).
config::CompileOptions vision_recipe(const config::CompileOptions& base);

/// The rules quantize_rtn adds for a vision tower: per-channel where uneven.
RtnRules vision_rtn_rules();

/// One calibration sample of a feature graph: a float vector per graph input, in graph order.
using FeatureSample = std::vector<std::vector<float>>;

/// Statistics of observed_nodes(g) over `samples`, run through `session` (a float session of
/// `g`) with forward_inputs: a max pass, and a histogram pass when `mode` needs one.
StatusOr<CalibStats> collect_feature_stats(const ir::Graph& g, ref::Session& session,
                                           const std::vector<FeatureSample>& samples, int mode);

/// The whole step: vision_recipe(options), a float session of `g` over `weights`, the
/// statistics of `samples` (calibration.mode), and quantize_rtn with vision_rtn_rules().
StatusOr<QuantizeResult> quantize_vision(const ir::Graph& g, const ir::WeightReader& weights,
                                         const std::vector<FeatureSample>& samples,
                                         const config::CompileOptions& options,
                                         const TensorSink& sink = nullptr);

}  // namespace qbc::quant
