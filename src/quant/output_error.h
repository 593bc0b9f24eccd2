// The output error ||X·d||² of weight-row errors d on calibration rows X of one linear
// input, batched: shared by searchWeightScale (its scale and clip searches) and the
// spinR1 check (round-to-nearest error as is and rotated).
// Internal to qbc_quant.
#pragma once

#include <cstdint>
#include <vector>

#include "f32_products.h"

namespace qbc::quant {

/// Calibration rows X [n, in] of one linear input, and ||X·d||² for weight-row errors d,
/// a batch of rows at a time: dᵀ(XᵀX)d through the Gram matrix when in ≤ min(n,
/// kGramMaxIn) (all n rows; fp64 through gemm_acc), otherwise ||X'·d||² on at most
/// kErrorRows evenly spaced rows X' of X, with X'·d in fp32 (d rounded to fp32, each
/// element one chain of fused multiply-adds in input order: f32_products.h) and its
/// squares summed in fp64. Per row that is at most max(kGramMaxIn, kErrorRows)·in
/// multiply-adds, whatever the model size. Every reduction in index order: the results
/// depend neither on the thread count nor on the CPU's vector width.
class OutputError {
 public:
  static constexpr int64_t kGramMaxIn = 512;  ///< Gram matrix up to this many inputs.
  static constexpr int64_t kErrorRows = 512;  ///< Calibration rows kept beyond that.

  /// `threads` builds the Gram matrix (0 = one per hardware thread).
  OutputError(std::vector<double> x, int64_t n, int64_t in, int threads);
  int64_t cols() const { return in_; }
  /// out[r] = ||X·d_r||² for the `rows` rows d_r of D [rows, in] (single-threaded; may
  /// be called concurrently).
  void errors(const double* D, int64_t rows, double* out) const;

 private:
  std::vector<double> gram_;
  f32_detail::PackedColumns xt_;  // X'ᵀ [in, m]
  int64_t n_, in_, m_ = 0;
};

}  // namespace qbc::quant
