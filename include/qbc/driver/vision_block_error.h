// How far each block of a quantized vision tower is from the float tower: the SQNR of every
// tower block's output on the vision part's calibration images, measured when the part is
// compiled (the compiled file keeps no per-block values, so `eval --images` reports the
// features; this reports where along the tower the error comes from).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "qbc/ir/graph.h"
#include "qbc/ir/weight_reader.h"
#include "qbc/quant/vision_quant.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// One tower block's error.
struct TowerBlockError {
  std::string node;      ///< Its output, e.g. "vis.blk.3.ffn_residual".
  double sqnr_db = 0.0;  ///< 10·log10(Σ ref² / Σ (ref − test)²) over every sample; +inf: exact.
};

/// At most this many calibration samples are compared (one forward of each tower per sample).
inline constexpr size_t kTowerErrorSamples = 8;

/// The SQNR of each block output (`vis.blk.N.ffn_residual`, in block order) of `quantized`
/// (fake-quant, over `quantized_weights`) against `float_graph` (float, over `float_weights`),
/// over the first kTowerErrorSamples of `samples`. Empty when the tower names no block outputs;
/// kInternal naming the block when either tower gives a non-finite value there.
StatusOr<std::vector<TowerBlockError>> tower_block_errors(
    const ir::Graph& float_graph, const ir::WeightReader& float_weights, const ir::Graph& quantized,
    const ir::WeightReader& quantized_weights, const std::vector<quant::FeatureSample>& samples);

/// True for a tower block's output name, "vis.blk.N.ffn_residual" with N decimal digits.
bool is_tower_block_output(const std::string& name);

/// [{"node", "sqnr_db"}] (an exact block's sqnr_db is null), for the MXQ's calibration record
/// and the compile summary's JSON.
nlohmann::json tower_block_json(const std::vector<TowerBlockError>& errors);

/// "blk.0 41.2, blk.1 39.8, ... dB": one line for the log.
std::string tower_block_text(const std::vector<TowerBlockError>& errors);

}  // namespace qbc::driver
