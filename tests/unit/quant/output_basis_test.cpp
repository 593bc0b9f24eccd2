// quant::output_basis, apply_spin_r1 and undo_spin_r1 (qbc/quant/output_basis.h): the record
// spinR1 leaves in a graph's metadata read back, and rows moved into and out of the rotated
// basis by the seeded random Hadamard Q = H_n · diag(s) / √n of qbc/quant/hadamard.h (the
// dense matrix, written out here, against the fast path the functions use).
#include "qbc/quant/output_basis.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "qbc/quant/hadamard.h"
#include "test_support.h"

namespace qbc::quant {
namespace {

TEST(OutputBasis, SpinR1RecordReadsBack) {
  ir::Graph g("g");
  record_spin_r1(g, 7, 64, {"embed", "blk.0.add"});
  auto b = output_basis(g);
  QBC_ASSERT_OK(b);
  ASSERT_TRUE(b->spin_r1_seed.has_value());
  EXPECT_EQ(*b->spin_r1_seed, 7u);
  EXPECT_EQ(b->hidden, 64);
  EXPECT_EQ(b->rotated.count("blk.0.add"), 1u);
  ir::Graph plain("p");
  auto none = output_basis(plain);
  QBC_ASSERT_OK(none);
  EXPECT_FALSE(none->spin_r1_seed.has_value());
}

// apply: each row x becomes x·Q; undo: x·Qᵀ, its inverse. Orders 64 (Sylvester) and 576
// (SmolVLM's width: 36 x 16, not a power of two).
TEST(OutputBasis, ApplyIsRowsTimesTheSeededHadamardAndUndoInvertsIt) {
  for (const int64_t n : {64, 576}) {
    OutputBasis b;
    b.spin_r1_seed = 3;
    b.hidden = n;
    auto q = random_hadamard(n, 3);
    QBC_ASSERT_OK(q);
    const int64_t rows = 3;
    std::vector<float> x(static_cast<size_t>(rows * n));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(std::sin(0.37 * i) * 2.0);
    std::vector<float> y = x;
    QBC_ASSERT_OK(apply_spin_r1(b, y.data(), rows));
    double max_err = 0.0, norm_x = 0.0, norm_y = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        double want = 0.0;
        for (int64_t i = 0; i < n; ++i)
          want += static_cast<double>(x[static_cast<size_t>(r * n + i)]) *
                  (*q)[static_cast<size_t>(i * n + j)];
        max_err = std::max(max_err, std::abs(want - y[static_cast<size_t>(r * n + j)]));
      }
    }
    EXPECT_LT(max_err, 1e-5) << n;
    for (size_t i = 0; i < x.size(); ++i) {
      norm_x += static_cast<double>(x[i]) * x[i];
      norm_y += static_cast<double>(y[i]) * y[i];
    }
    EXPECT_NEAR(norm_y, norm_x, 1e-3 * norm_x) << n;  // a rotation
    QBC_ASSERT_OK(undo_spin_r1(b, y.data(), rows));
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], x[i], 1e-5) << n << " at " << i;
  }
}

TEST(OutputBasis, WithoutARotationApplyAndUndoAreRefused) {
  OutputBasis b;
  b.hidden = 4;
  std::vector<float> x(4, 1.0f);
  EXPECT_EQ(apply_spin_r1(b, x.data(), 1).code(), Code::kFailedPrecondition);
  EXPECT_EQ(undo_spin_r1(b, x.data(), 1).code(), Code::kFailedPrecondition);
  EXPECT_EQ(x, std::vector<float>(4, 1.0f));
}

}  // namespace
}  // namespace qbc::quant
