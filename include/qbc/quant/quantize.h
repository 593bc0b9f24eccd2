// Round-to-nearest quantization of an MBLT graph per the bit configuration:
// linears become qlinear (integer weights with per-output-channel scales, a
// static input scale), attention nodes get a quantized KV cache. Integer
// weights and scales go to a sidecar file; see docs/numerics.md.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compile_options.pb.h"
#include "qbc/ir/graph.h"
#include "qbc/ir/phase_image.h"
#include "qbc/ir/weight_reader.h"
#include "qbc/quant/calibrate.h"
#include "qbc/support/status.h"
#include "qbc/tensorfile/safetensors_writer.h"

namespace qbc::quant {

/// What quantize_rtn() produced.
struct QuantizeResult {
  ir::Graph graph;                                 ///< The quantized graph (verifies).
  std::vector<tensorfile::TensorToWrite> sidecar;  ///< Integer weights and scales, by sidecar name.
  int quantized_linears = 0;
  int float_linears = 0;  ///< Left in float (weight16Bits overrides).
  /// Linears with a second weight image for one phase (bit.prefill / bit.decode).
  int second_images = 0;
};

/// The weights the quantized graph of `r` reads: its sidecar tensors (int8 codes as their
/// values, fp32 scales as they are) on top of `base`, the float checkpoint it was made from.
/// kInternal for a sidecar tensor of another dtype. `r` must outlive the reader.
ir::WeightReader with_sidecar(ir::WeightReader base, const QuantizeResult& r);

/// The precision chosen for one linear node.
struct LinearBits {
  int weight = 8;      ///< 4 or 8; 16 = leave the layer in float.
  int activation = 8;  ///< 8 or 16.
};

/// Bits of the linear node `node_name` (part `head` or not) under `options.bit()`,
/// with the layerOverrides globs applied.
LinearBits linear_bits(const std::string& node_name, bool head,
                       const config::CompileOptions& options);

/// The weight group size for a linear with `in` inputs under `options.bit()`:
/// bit.weightGroupSize, or 0 (one scale per output channel) when that is 0 or covers
/// the whole row.
int64_t weight_group(const config::CompileOptions& options, int64_t in);

/// Checks that the calibration settings are ones qbc implements (kUnimplemented
/// naming the key otherwise), before any work.
Status check_supported(const config::CompileOptions& options);

/// Receives each sidecar tensor as soon as it is made (so a multi-GB model never holds
/// all its integer weights in memory).
using TensorSink = std::function<Status(tensorfile::TensorToWrite)>;

/// Integer weights a pass chose for one linear node (GPTQ, a clip search): codes
/// [out, in] row-major in [-2^(bits-1), 2^(bits-1) - 1] and one scale per output
/// channel, or per (output channel, group) row-major when weight_group() > 0.
struct FixedWeights {
  int bits = 8;
  std::vector<int8_t> codes;
  std::vector<float> scales;
  std::vector<int8_t> zeros;  ///< One per scale, or empty: symmetric (z = 0).
  /// A float offset per scale (ŵ = s·(q − z) + m; imported GGUF Q4_1 / Q5_1 blocks, groups
  /// only), or empty.
  std::vector<float> mins;
  /// Codes imported from a pre-quantized checkpoint: `bits` and `group` are the checkpoint's
  /// (not the configuration's) and quantize_rtn writes them as they are.
  bool imported = false;
  /// With `imported`: inputs per scale (0: one scale per output channel).
  int64_t group = 0;
};
/// By linear node name.
using FixedWeightMap = std::map<std::string, FixedWeights>;

/// Rules a caller's recipe adds to the configuration's (the vision recipe, vision_quant.h).
struct RtnRules {
  /// A linear whose input width is not a multiple of bit.weightGroupSize gets one scale per
  /// output channel instead of a shorter last group.
  bool per_channel_when_uneven = false;
};

/// A linear's second weight image (bit.prefill / bit.decode, docs/quantization.md "Precision
/// per phase"): the phase whose programs read it, its width and its group (0: per channel).
struct SecondImage {
  ir::ImagePhase phase = ir::ImagePhase::kPrefill;
  int bits = 8;
  int64_t group = 0;
};

/// The phase bit.prefill or bit.decode gives a second weight image, and its keys: the one whose
/// `weight` is set (config validation refuses both); nullopt when neither is.
struct PhaseWeightKeys {
  ir::ImagePhase phase = ir::ImagePhase::kPrefill;
  const config::PhaseWeightBits* keys = nullptr;
};
std::optional<PhaseWeightKeys> phase_weight_keys(const config::CompileOptions& options);

/// The second image linear `node` (of `cols` inputs, in the head or not, whose main image is
/// `bits` wide) gets under `options`, if any: decoder-block linears only (the head keeps one
/// image), and none when the main image already has the phase's width (a layer the main
/// image keeps at 8 bits serves an 8-bit phase as it is) or is float (16).
std::optional<SecondImage> second_image(const ir::Node& node, int bits, int64_t cols,
                                        const config::CompileOptions& options,
                                        const RtnRules& rules = {});

/// Second image `s` of a linear's float weight `w` [rows, cols]: round to nearest at its bits
/// and group, with zero points under bit.weightZeroPoint (the phaseImages pass, and
/// quantize_rtn when that pass did not run).
StatusOr<FixedWeights> round_second_image(const std::vector<float>& w, int64_t rows, int64_t cols,
                                          const SecondImage& s,
                                          const config::CompileOptions& options);

/// Quantizes `g` with round-to-nearest weights (or the ones in `fixed`) and calibrated
/// activation scales. Sidecar tensors go to `sink` when given, else to
/// QuantizeResult::sidecar. An empty `weights` is a source without values (shape_only): the
/// same graph with scales 1, offsets 0, no statistics read and no tensors written.
/// full_attention nodes get static Q/K/V scales (docs/numerics.md "full_attention").
/// A linear with a second image (second_image) takes its integers from `second` (the
/// phaseImages pass rounded them from the float weights before a pass replaced those);
/// without an entry there, round to nearest of the weights `weights` reads, which is
/// kFailedPrecondition when `fixed` chose the linear's main image (its float weights may be
/// gone).
StatusOr<QuantizeResult> quantize_rtn(const ir::Graph& g, const CalibStats& stats,
                                      const ir::WeightReader& weights,
                                      const config::CompileOptions& options,
                                      const TensorSink& sink = nullptr,
                                      const FixedWeightMap* fixed = nullptr,
                                      const RtnRules& rules = {},
                                      const FixedWeightMap* second = nullptr);

}  // namespace qbc::quant
