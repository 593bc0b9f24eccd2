// Bits by budget: `qbc compile --target-size SIZE` or `--target-decode-tok-s R` chooses which
// decoder-block linears keep 8-bit weights and which go to 4 bits, from each linear's
// measured sensitivity (quant/bit_sensitivity.h) and the cost model of `qbc plan`
// (driver/plan.h), before any quantization work. The choice is written into the effective
// configuration (bit.transformer.weight.* = 4 and the 8-bit linears by name in
// bit.layerOverrides.weight8Bits, with the flag as their origin), so the MXQ records it and
// `qbc dump-config OUT.mxq` recompiles to the same file (docs/quantization.md "Bits by budget").
//
// The search: the candidates (block linears the configuration does not fix at 8 or 16 bits)
// are ordered by the error they add per weight at 4 bits, largest first; the first k keep 8
// bits. k is the largest whose plan meets the target (the DRAM weights at most SIZE, or the
// predicted decode at least R tokens/s), found by bisection: about log2(candidates) + 2 plans.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qbc/config/config.h"
#include "qbc/driver/model_loader.h"
#include "qbc/quant/bit_sensitivity.h"
#include "qbc/support/status.h"

namespace qbc::driver {

/// What the user asked for.
struct BitBudgetRequest {
  enum class Kind { kNone, kSize, kDecode };
  Kind kind = Kind::kNone;
  /// kSize: bytes of DRAM weights (the language model's weight image, as `qbc plan`'s
  /// `weights` line counts it); kDecode: tokens per second of one sequence's decode.
  double target = 0;
  /// The flag as given ("--target-size 1.2GiB"): messages and the keys' origin.
  std::string flag;
};

/// "1.5" (GiB), "1.5GiB", "900 MiB", "512KiB", "2GB", "300MB", "4096B": bytes. kInvalidArgument
/// naming `flag` for anything else, or a size that is not positive and finite.
StatusOr<double> parse_size(const std::string& text, const std::string& flag);

/// The largest k in [0, n] with ok(k), for an ok that holds up to some k* and not after
/// (bisection: ok(0), ok(n), then about log2(n) calls). -1 when ok(0) fails.
StatusOr<int64_t> largest_prefix(int64_t n, const std::function<StatusOr<bool>(int64_t)>& ok);

/// The order in which linears keep 8 bits: indices of `errors` by LinearBitError::density(),
/// largest first (ties in graph order).
std::vector<size_t> sensitivity_order(const std::vector<quant::LinearBitError>& errors);

/// What the search chose and predicted (every figure an estimate of the cost model).
struct BitBudgetChoice {
  BitBudgetRequest request;
  int64_t candidates = 0;          ///< linears the search chose bits for
  std::vector<std::string> eight;  ///< the candidates kept at 8 bits, in sensitivity order
  /// Every candidate, most sensitive first (`eight` is its first k), and its measured 4-bit
  /// error per weight (quant::LinearBitError::density()).
  std::vector<std::string> order;
  std::vector<double> density;
  int64_t weights_bytes = 0;               ///< DRAM weights of the choice
  int64_t all4_bytes = 0, all8_bytes = 0;  ///< every candidate at 4 / at 8 bits
  /// kDecode: the scheme timed (the fastest decode with every candidate at 8 bits) and the
  /// predicted tokens/s of the choice and of the two ends.
  std::string scheme;
  double decode_tok_s = 0, all4_tok_s = 0, all8_tok_s = 0;
  int plans = 0;  ///< plans the search ran
  double seconds = 0;
};

/// Measures the candidates on `cfg`'s calibration data and chooses; rewrites cfg->options
/// (and its origins) to the choice. kInvalidArgument when the target is out of reach (every
/// candidate at 4 bits is still too large or too slow: the message gives that end), for a
/// pre-quantized checkpoint (its codes keep their bits) and for a model without block linears.
StatusOr<BitBudgetChoice> choose_bits(const LoadedModel& model, config::ResolvedConfig* cfg,
                                      const BitBudgetRequest& request, int threads);

/// "bits by budget (--target-size 1GiB): 41 of 112 block linears at 8 bits, 71 at 4; DRAM
/// weights 0.98 GiB predicted (all at 4 ..., all at 8 ...)".
std::string bit_budget_text(const BitBudgetChoice& c);
/// The JSON object of the compile summary's "bit_budget" key (docs/cli.md).
std::string bit_budget_json(const BitBudgetChoice& c);

}  // namespace qbc::driver
