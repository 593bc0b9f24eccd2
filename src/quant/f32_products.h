// Private to src/quant: the fp32 products of the output-error searches (OutputError's
// row path: searchWeightScale's scale and clip searches, the spinR1 check). Every
// element of a product is one chain of fused multiply-adds over k = 0, 1, ..., K − 1
// starting from +0, whichever kernel runs it (AVX-512, AVX2 with FMA, or portable C++
// with std::fmaf): a fused multiply-add is correctly rounded, so the kernels, any split
// of the rows and any thread count give the same bits.
#pragma once

#include <cstdint>
#include <vector>

namespace qbc::quant::f32_detail {

/// Columns of a product's right-hand side, packed once.
inline constexpr int64_t kStrip = 16;

/// The kernels; kAuto takes the fastest the CPU has.
enum class Kernel { kAuto, kAvx512, kAvx2, kPortable };

/// Whether this CPU runs `k` (kPortable and kAuto always).
bool available(Kernel k);

/// The right-hand side X [K, N] (row-major, fp64 values rounded to fp32) as strips of
/// kStrip columns: strip t, row k at (t · K + k) · kStrip; N is padded to whole strips
/// with zero columns.
class PackedColumns {
 public:
  PackedColumns() = default;
  PackedColumns(const double* x, int64_t K, int64_t N);
  int64_t depth() const { return k_; }
  int64_t cols() const { return n_; }
  int64_t strips() const { return (n_ + kStrip - 1) / kStrip; }
  const float* strip(int64_t t) const { return v_.data() + t * k_ * kStrip; }

 private:
  int64_t k_ = 0, n_ = 0;
  std::vector<float> v_;
};

/// Y[rows, strips · kStrip] = A[rows, K] · X (A row-major, lda apart; Y's padding columns
/// are +0 for finite A).
void products(const float* A, int64_t rows, int64_t lda, const PackedColumns& x, float* Y,
              Kernel kernel = Kernel::kAuto);

}  // namespace qbc::quant::f32_detail
