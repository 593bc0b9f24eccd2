// How much each decoder-block linear of a float model loses at 4 bits against 8: the input
// of bits by budget (`qbc compile --target-size` / `--target-decode-tok-s`,
// driver/bit_budget.h). Measured on calibration samples, block by block: the block is run in
// float, then once per linear with only that linear's weights at round-to-nearest 4 bits
// (the configured groups, zero points and MSE clip), and the error is the block output's,
//   e4 = Σ ‖y₄ − y‖² / Σ ‖y‖²   (y the block's output, the residual stream it leaves),
// so a linear counts by what its error does to the stream, through attention, the gated FFN
// and the residual adds, not by its own output's relative error (which, tried first, ranked
// the small value projections first and chose worse than its reverse on stories260K:
// docs/quantization.md "Bits by budget"). e8 = e4 · (15/255)², the squared ratio of the code
// steps over one range (first order: the block's output error is quadratic in a small step).
// The first 4 samples, their first 128 tokens: 1 + (linears a block) runs of each block.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compile_options.pb.h"
#include "qbc/ir/graph.h"
#include "qbc/quant/calibrate.h"
#include "qbc/quant/weight_store.h"
#include "qbc/ref/session.h"
#include "qbc/support/status.h"

namespace qbc::quant {

/// One linear's measurement.
struct LinearBitError {
  std::string node;            ///< "blk.3.ffn.down_proj"
  int64_t rows = 0, cols = 0;  ///< the weight's [out, in]
  double e4 = 0, e8 = 0;       ///< relative block output error at 4 and at 8 bits
  /// The error the linear adds per weight when it goes from 8 to 4 bits: (e4 − e8) / (rows ·
  /// cols). The budget keeps the linears with the largest at 8 bits.
  double density() const;
};

/// Every linear of the decoder blocks of float graph `g` (q, k, v or fused qkv, o, gate, up or
/// fused gate_up, down; in graph order), measured on `num_samples` of `samples` (at most 4
/// are run, each cut to its first 128 tokens unless it carries DeepStack rows). The head and the
/// linears outside the blocks are not measured. `options` gives the quantizer (bit.weightGroupSize,
/// bit.weightZeroPoint, hessianQuant's mseClip); its bit widths are not read. The result does not
/// depend on the session's thread count.
StatusOr<std::vector<LinearBitError>> linear_bit_errors(
    const ir::Graph& g, const WeightStore& weights, const SampleSource& samples, size_t num_samples,
    const config::CompileOptions& options, const ref::SessionOptions& session = {},
    const DeepStackSource* deepstack = nullptr);

}  // namespace qbc::quant
