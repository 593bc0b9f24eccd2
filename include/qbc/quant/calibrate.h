// Calibration: running the float graph on calibration samples and turning the
// observed activations into static quantization ranges (calibration.mode).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "compile_options.pb.h"
#include "qbc/ir/graph.h"
#include "qbc/ir/weight_reader.h"
#include "qbc/ref/session.h"
#include "qbc/runner/runner.h"
#include "qbc/support/status.h"

namespace qbc::quant {

/// Statistics of one observed tensor (a node's output), over all calibration tokens.
struct TensorStats {
  float absmax = 0.0f;                ///< max |x| over everything.
  std::vector<float> channel_absmax;  ///< max |x| per last-dim channel.
  std::vector<float> channel_min;     ///< min x per last-dim channel.
  std::vector<float> channel_max;     ///< max x per last-dim channel.
  /// For the input of a rope node: per rotary pair (head h, pair i; index h·rotary_dim/2 + i)
  /// the largest |(x_i, x_{i+rotary_dim/2})| seen. Empty elsewhere.
  std::vector<float> pair_radius;
  std::vector<double> histogram;  ///< counts of |x| in kHistogramBins bins over [0, absmax].
  int64_t count = 0;              ///< elements observed.
};

/// Bins of the |x| histogram used by modes 1 and 2.
inline constexpr int kHistogramBins = 2048;

/// Per node name.
using CalibStats = std::map<std::string, TensorStats>;

/// Supplies calibration sample `i` as embedded inputs [seq, hidden].
using SampleSource = std::function<Status(size_t i, std::vector<float>* embeds, int64_t* seq)>;

/// Supplies calibration sample `i`'s DeepStack rows (Qwen3-VL, the vision part's rows the host
/// adds to the residual stream after the first blocks, docs/multimodal.md): `levels` gets one
/// [seq, hidden] vector per DeepStack level, or stays empty when the sample has none (a text
/// sample: zeros). `seq` is the sample's length from the SampleSource.
using DeepStackSource =
    std::function<Status(size_t i, int64_t seq, std::vector<std::vector<float>>* levels)>;

/// How a rope node pairs the channels of its input: heads of head_dim, the first
/// rotary_dim of each rotated as pairs (i, i + rotary_dim/2).
struct RotaryPairing {
  int64_t head_dim = 0, rotary_dim = 0;
};

/// Folds `x` (rows of `channels` values) into the max / per-channel min-max statistics,
/// and into pair_radius when `pairing` is given.
void observe_max(TensorStats& s, const std::vector<float>& x, int64_t channels,
                 const RotaryPairing* pairing = nullptr);

/// The inputs of the rope nodes that rotate keys, by node name, with their pairing.
std::map<std::string, RotaryPairing> rotated_key_inputs(const ir::Graph& g);
/// Folds `x` into the |x| histogram over [0, s.absmax] (after the max pass).
void observe_histogram(TensorStats& s, const std::vector<float>& x);

/// The nodes whose outputs quantization needs: the inputs of every linear and
/// the q, k, v inputs of every attention and full_attention node.
std::vector<std::string> observed_nodes(const ir::Graph& g);

/// Runs `samples` (count `n`) through `runner` (a float session of `g`) and
/// collects statistics of the observed nodes: a max pass, and a histogram pass
/// when `mode` needs one. Progress is reported as events::progress("calib").
StatusOr<CalibStats> collect_stats(const ir::Graph& g, runner::Runner& runner, size_t n,
                                   const SampleSource& samples, int mode);

/// The same statistics, computed block by block so that only one decoder block's
/// weights and activations are in memory at a time: the graph is cut into segments
/// (block 0 with whatever precedes it, each further block, the head), each segment
/// becomes its own float session over `weights`, and every sample's residual stream
/// is carried from one segment to the next ([seq, hidden] floats per sample). Equal
/// to collect_stats() on the same samples up to float summation order. With `checkpoint`
/// (calib_checkpoint.h), every finished block is saved and the blocks an earlier run on the
/// same inputs finished are loaded instead of run: the statistics are the same bit for bit.
struct CalibCheckpoint;
StatusOr<CalibStats> collect_stats_blockwise(const ir::Graph& g, const ir::WeightReader& weights,
                                             size_t n, const SampleSource& samples, int mode,
                                             const ref::SessionOptions& session = {},
                                             const CalibCheckpoint* checkpoint = nullptr,
                                             const DeepStackSource* deepstack = nullptr);

/// The clipping range of a per-tensor activation for `options.calibration()`:
/// mode 0 max, mode 1 the `percentile` quantile of |x|, mode 2 the clip that
/// minimises the expected quantization MSE at `bits`.
float activation_range(const TensorStats& s, const config::CalibrationConfig& options, int bits);

}  // namespace qbc::quant
