// GPTQ ("HessianQuant", arXiv 2210.17323) for one linear layer, and the
// accumulation of its Hessian from calibration inputs. Plain C++ (no LibTorch).
//
// Weights follow docs/numerics.md: W is [out, in] row-major, quantized
// symmetrically with zero point 0 to b-bit codes
//   q = clamp(rne(w / s), -2^(b-1), 2^(b-1) - 1),   ŵ = s · q,
// with an fp32 scale per output row (group_size 0) or per (row, group of
// group_size consecutive input columns). Groups are "static": they are defined
// in the original column order and their scales are fixed before the GPTQ
// sweep, so act-order never makes a group non-contiguous.
//
// Numerics: the Hessian, its factorisation and the weights during the sweep
// are all fp64 (the input weights are fp32 and exactly representable).
// Every reduction has a fixed order and no fused multiply-add is used, so the
// results are identical for any thread count, and — as vectorisation is only
// across independent output elements — for any SIMD width the code runs with.
// See docs/research/quant.md §6 for the algorithm and §2.1-2.3 for the scale
// rules.
#pragma once

#include <cstdint>
#include <vector>

#include "qbc/support/status.h"

namespace qbc::quant {

/// Accumulates the GPTQ Hessian H = (2/N) · Σ_n x_nᵀ x_n of one linear layer
/// over N calibration rows x_n (each `in` features).
///
/// The unscaled sum Σ xᵀx is kept in fp64 (products of fp32 inputs are exact
/// in fp64) and every entry adds the rows in the order they were given, so the
/// result does not depend on how the rows are split across add() calls or on
/// the thread count. Only the upper triangle is accumulated.
class HessianAccumulator {
 public:
  /// An empty accumulator for inputs of `in` features. `num_threads` 0 uses
  /// one thread per hardware thread.
  explicit HessianAccumulator(int64_t in, int num_threads = 0);

  /// Adds `rows` calibration rows `x[rows, in]` (row-major). Fails without
  /// adding anything when a value is not finite.
  Status add(const float* x, int64_t rows);

  /// The number of input features.
  int64_t in() const { return in_; }
  /// The number of rows added so far (N).
  int64_t samples() const { return samples_; }

  /// H = (2/N) · Σ xᵀx as a symmetric [in, in] row-major matrix, each entry
  /// computed as sum · (2.0 / N). Fails when no rows were added.
  StatusOr<std::vector<double>> hessian() const;

 private:
  int64_t in_ = 0;
  int num_threads_ = 0;
  int64_t samples_ = 0;
  std::vector<double> sum_;  // Σ xᵀx, upper triangle (the lower part is not maintained).
};

/// Options of gptq_quantize() and rtn_quantize(). The GPTQ knobs mirror
/// `hessianQuant.attributes` in proto/compile_options.proto.
struct GptqOptions {
  /// Code width: 4 or 8 on the NPU (2..8 accepted).
  int bits = 8;
  /// Input columns per scale group; 0 = one scale per output row.
  int64_t group_size = 0;
  /// Columns quantized together before the lazy batch update (hessianQuant blockSize).
  int64_t block_size = 128;
  /// Damping λ = perc_damp · mean(diag H) added to the diagonal, in (0, 1] (percDamp).
  double perc_damp = 0.01;
  /// Quantize columns in order of decreasing diag(H) (actOrder); ties keep index order.
  bool act_order = true;
  /// On a Cholesky failure the damping is multiplied by 10 and the factorisation
  /// retried, at most this many times.
  int max_damp_retries = 5;
  /// Choose each scale by the MSE grid search of docs/research/quant.md §2.3
  /// (shrink the absmax by p = 1, 0.99, ... and keep the p minimising Σ|ŵ − w|^mse_norm)
  /// instead of absmax / qmax.
  bool mse_clip = false;
  /// The error norm of the MSE grid search.
  double mse_norm = 2.4;
  /// Grid points per unit shrink of the MSE search (candidates p = 1 − i / mse_grid).
  int mse_grid = 100;
  /// Largest shrink tried by the MSE search (i < mse_max_shrink · mse_grid).
  double mse_max_shrink = 0.8;
  /// Asymmetric: an integer zero point z per scale, ŵ = s · (q − z) (docs/numerics.md).
  bool zero_point = false;
  /// After the sweep, at most this many passes of greedy coordinate descent on the
  /// codes (0 = none): column by column, each code moves by the integer step that most
  /// lowers δᵀ(H + λI)δ for its row (δ = W − Ŵ), within the code range; a pass that
  /// moves nothing ends it. The loss never rises (a qbc extension; docs/quantization.md).
  int refine_sweeps = 0;
  /// Worker threads; 0 = one per hardware thread. Results do not depend on it.
  int num_threads = 0;
};

/// Integer weights and scales of one linear layer, plus what the quantizer did.
struct GptqResult {
  int64_t out = 0;         ///< Rows of W (output channels).
  int64_t in = 0;          ///< Columns of W (input features).
  int bits = 0;            ///< Code width.
  int64_t group_size = 0;  ///< 0 = per output channel.
  /// Codes [out, in] in the original column order, each in [−2^(bits−1), 2^(bits−1) − 1].
  std::vector<int8_t> codes;
  /// Scales [out, groups()] (fp32, |s| ≥ 1e-8, negative for ScaleEnd::kLongEnd of a
  /// positive extreme): group g covers columns
  /// [g·group_size, min((g+1)·group_size, in)).
  std::vector<float> scales;

  /// Zero points [out, groups()] in the code range when zero_point, else empty (z = 0).
  std::vector<int8_t> zeros;

  // Statistics of the GPTQ run (zero for rtn_quantize).
  double damp = 0;           ///< The damping λ actually added to diag(H).
  double damp_fraction = 0;  ///< λ / mean(diag H) (perc_damp · 10^retries).
  int damp_retries = 0;      ///< Cholesky attempts that failed before the one that worked.
  int64_t dead_columns = 0;  ///< Columns with H_ii = 0 (their weights were set to 0).
  /// GPTQ's loss ½ Σ (w − ŵ)² / d² over all weights, d² being the diagonal of
  /// the inverse Hessian at the time the weight was quantized. It equals
  /// ½ Σ_rows δᵀ(H + λI)δ for δ = W − Ŵ (dead columns zeroed), i.e. the mean
  /// over calibration rows of ‖x (W − Ŵ)ᵀ‖² plus the damping term.
  double proxy_loss = 0;
  /// proxy_loss at the end of the GPTQ sweep, before the coordinate-descent passes
  /// (equal to proxy_loss when refine_sweeps is 0).
  double sweep_proxy_loss = 0;
  /// Codes the coordinate-descent passes changed.
  int64_t refined_codes = 0;

  /// Scale groups per row: 1, or ceil(in / group_size).
  int64_t groups() const;
  /// The scale of weight (row, col).
  float scale(int64_t row, int64_t col) const;
  /// The zero point of weight (row, col) (0 when symmetric).
  int zero(int64_t row, int64_t col) const;
};

/// Which end of the two's-complement code range [−qmax−1, qmax] a row's (or
/// group's) extreme weight e — its value of largest magnitude, the first on ties —
/// is mapped to.
enum class ScaleEnd {
  kQmax,     ///< s = p·|e| / qmax: e lands on ±qmax, s > 0 (the absmax rule).
  kLongEnd,  ///< s = −p·e / (qmax + 1): e lands on −(qmax + 1), the end with one
             ///< more level; s < 0 when e > 0 (llama.cpp's Q4_0 rule). At 4 bits
             ///< this uses all 16 codes instead of 15.
};

/// The extreme of w[0, len): its value of largest magnitude, the first on ties (0 when empty).
double extreme_weight(const double* w, int64_t len);

/// The weight scale of extreme `e` shrunk by `p` in (0, 1] (docs/numerics.md):
/// for p = 1, fp32(|e|) / fp32(qmax [+1]) in fp32; otherwise p·fp32(|e|) / (qmax [+1])
/// in fp64 rounded once to fp32; the magnitude is kept ≥ 1e-8 and the sign set by `end`.
float extreme_scale(double e, double p, int bits, ScaleEnd end);

/// The symmetric RTN scale of the weights w[0, len) (docs/numerics.md): of
/// extreme_scale(e, 1, bits, kQmax) and (…, kLongEnd), the one with the smaller
/// squared error, kQmax on ties.
float rtn_scale(const double* w, int64_t len, int bits);

/// Ŵ[out, in] = scale · (code − zero), each computed in fp64 and rounded to fp32.
std::vector<float> dequantize(const GptqResult& r);

/// Round-to-nearest quantization of `W[out, in]` with the scale rule of
/// gptq_quantize() (absmax or MSE grid, per row or per group); no Hessian.
/// Uses `options.bits`, `group_size`, the `mse_*` fields and `num_threads`.
StatusOr<GptqResult> rtn_quantize(const std::vector<float>& W, int64_t out, int64_t in,
                                  const GptqOptions& options);

/// GPTQ quantization of `W[out, in]` given the Hessian `H[in, in]` of its inputs
/// (as from HessianAccumulator; only the upper triangle is read; taken by value
/// and used as the work space, so move it in to avoid a copy).
///
/// Steps: columns with H_ii = 0 are dead (H_ii := 1, W[:, i] := 0); scales are
/// fixed on that W; columns are ordered by decreasing H_ii when act_order;
/// λ = perc_damp · mean(diag H) is added to the diagonal (×10 per Cholesky
/// failure, at most max_damp_retries times); the upper Cholesky factor U of
/// H⁻¹ is formed; columns are quantized in blocks of block_size with error
/// feedback (w_j −= (w_i − ŵ_i)/U_ii · U_ij) and a lazy batch update of the
/// later columns after each block; then, with refine_sweeps, coordinate descent on
/// the codes against H + λI (original order); the codes are returned in the original order.
///
/// Errors (kInvalidArgument): sizes that do not match, bad options, non-finite
/// weights or Hessian entries, a negative diagonal; (kFailedPrecondition) the
/// damped Hessian is still not positive definite after the retries.
StatusOr<GptqResult> gptq_quantize(const std::vector<float>& W, int64_t out, int64_t in,
                                   std::vector<double> H, const GptqOptions& options);

/// The factorisation gptq_quantize() sweeps with, made once for every linear reading the same
/// input (and the float target's ridge solve, RidgeSolver::from_factor): with P the act order
/// (identity without act_order) and dead inputs at a unit diagonal,
/// UᵀU = (P H Pᵀ + λI)⁻¹, U upper. Depends on H and the options' act_order, perc_damp,
/// max_damp_retries and refine_sweeps only (not on bits or groups).
struct GptqFactor {
  int64_t n = 0;
  std::vector<int64_t> perm;  ///< Act order: sweep position i is input perm[i].
  std::vector<bool> dead;     ///< Inputs with H_ii = 0 (their weights count as 0).
  std::vector<double> U;      ///< [n, n] row-major, upper; the strict lower part is +0.
  double lambda = 0;          ///< The damping λ added to the diagonal.
  double fraction = 0;        ///< λ / mean(diag H).
  int retries = 0;            ///< Cholesky attempts that failed first.
  std::vector<double> A;      ///< refine_sweeps > 0: H + λI in the original order, else empty.
};

/// The factor of H (as gptq_quantize(), whose errors it returns; H is consumed).
StatusOr<GptqFactor> gptq_factor(std::vector<double> H, const GptqOptions& options);

/// gptq_quantize() with a factor from gptq_factor() of the same n and options (the same bits
/// as gptq_quantize(W, out, in, H, options) for that H).
StatusOr<GptqResult> gptq_quantize(const std::vector<float>& W, int64_t out, int64_t in,
                                   const GptqFactor& factor, const GptqOptions& options);

}  // namespace qbc::quant
