// The fp32 products of the output-error searches (src/quant/f32_products.h) and the
// OutputError built on them (src/quant/output_error.h): every kernel the host runs gives,
// bit for bit, a plain loop's chain of std::fmaf over k from +0; a split of the rows
// changes nothing; OutputError's row path stays within fp32 rounding of the fp64 error
// and ranks candidates as fp64 does except where they tie to that precision.
#include "f32_products.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "output_error.h"

namespace qbc::quant::f32_detail {
namespace {

struct Shape {
  int64_t rows, k, n;
};

// Row tiles of 4 and the 1-3 row tails, groups of 1-4 strips, ragged last strips (zero
// padding), k panels past 128, strided rows of A.
const Shape kShapes[] = {{1, 1, 1},    {3, 5, 7},     {4, 16, 16},   {5, 127, 17}, {7, 128, 33},
                         {9, 129, 64}, {13, 300, 70}, {64, 257, 80}, {2, 600, 15}, {67, 40, 512}};

std::vector<float> reference(const std::vector<float>& A, int64_t lda, const std::vector<float>& X,
                             const Shape& s, int64_t ldy) {
  std::vector<float> y(static_cast<size_t>(s.rows * ldy), 0.0f);
  for (int64_t r = 0; r < s.rows; ++r) {
    for (int64_t j = 0; j < s.n; ++j) {
      float acc = 0.0f;
      for (int64_t k = 0; k < s.k; ++k) acc = std::fmaf(A[r * lda + k], X[k * s.n + j], acc);
      y[r * ldy + j] = acc;
    }
  }
  return y;
}

TEST(F32Products, EveryKernelIsOneFusedChainPerElement) {
  std::mt19937 rng(11);
  std::normal_distribution<double> nd(0.0, 1.0);
  int kernels_run = 0;
  for (Kernel kernel : {Kernel::kAuto, Kernel::kAvx512, Kernel::kAvx2, Kernel::kPortable}) {
    if (!available(kernel)) continue;
    ++kernels_run;
    for (const Shape& s : kShapes) {
      SCOPED_TRACE(testing::Message() << "kernel " << static_cast<int>(kernel) << " rows " << s.rows
                                      << " k " << s.k << " n " << s.n);
      const int64_t lda = s.k + 3;
      std::vector<float> A(static_cast<size_t>(s.rows * lda));
      std::vector<double> X64(static_cast<size_t>(s.k * s.n));
      for (float& v : A) v = static_cast<float>(nd(rng));
      for (double& v : X64) v = nd(rng);
      std::vector<float> X(X64.begin(), X64.end());  // what the packing rounds to
      const PackedColumns packed(X64.data(), s.k, s.n);
      ASSERT_EQ(packed.strips(), (s.n + kStrip - 1) / kStrip);
      const int64_t ldy = packed.strips() * kStrip;
      std::vector<float> y(static_cast<size_t>(s.rows * ldy), -1.0f);
      products(A.data(), s.rows, lda, packed, y.data(), kernel);
      const std::vector<float> want = reference(A, lda, X, s, ldy);
      ASSERT_EQ(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)), 0);
    }
  }
  // The dispatch sees what the CPU has (an AVX-512 host must not fall back unnoticed).
  EXPECT_EQ(available(Kernel::kAvx512), __builtin_cpu_supports("avx512f") != 0);
  EXPECT_EQ(available(Kernel::kAvx2),
            __builtin_cpu_supports("avx2") != 0 && __builtin_cpu_supports("fma") != 0);
  EXPECT_EQ(kernels_run, 2 + available(Kernel::kAvx512) + available(Kernel::kAvx2));
}

// Fused and unfused chains differ: the reference above is a real constraint (a kernel that
// multiplied and then added would fail it on these inputs).
TEST(F32Products, AFusedChainDiffersFromMultiplyThenAdd) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int differ = 0;
  for (int i = 0; i < 1000; ++i) {
    const float a = nd(rng), b = nd(rng), c = nd(rng);
    volatile float p = a * b;
    differ += std::fmaf(a, b, c) != p + c;
  }
  EXPECT_GT(differ, 0);
}

TEST(F32Products, ASplitOfTheRowsChangesNothing) {
  std::mt19937 rng(7);
  std::normal_distribution<double> nd(0.0, 1.0);
  const int64_t rows = 37, K = 300, N = 70;
  std::vector<float> A(static_cast<size_t>(rows * K));
  std::vector<double> X(static_cast<size_t>(K * N));
  for (float& v : A) v = static_cast<float>(nd(rng));
  for (double& v : X) v = nd(rng);
  const PackedColumns packed(X.data(), K, N);
  const int64_t ldy = packed.strips() * kStrip;
  std::vector<float> whole(static_cast<size_t>(rows * ldy)), parts(whole.size());
  products(A.data(), rows, K, packed, whole.data());
  const int64_t cuts[] = {0, 1, 6, 19, rows};
  for (int i = 0; i + 1 < 5; ++i)
    products(A.data() + cuts[i] * K, cuts[i + 1] - cuts[i], K, packed,
             parts.data() + cuts[i] * ldy);
  EXPECT_EQ(std::memcmp(whole.data(), parts.data(), whole.size() * sizeof(float)), 0);
}

// OutputError's row path (in > kGramMaxIn): ||X'd||² within fp32 rounding of the fp64
// value, and the candidate each row would choose the same as in fp64 unless the two errors
// are equal to that precision.
TEST(OutputErrorRows, RankCandidatesAsFp64Does) {
  std::mt19937 rng(19);
  std::normal_distribution<double> nd(0.0, 1.0);
  const int64_t n = 600, in = 1024, rows = 40, candidates = 22;
  std::vector<double> x(static_cast<size_t>(n * in));
  for (int64_t i = 0; i < n * in; ++i) x[i] = static_cast<float>(nd(rng) * (1 + (i % in) % 7));
  const OutputError err(x, n, in, 2);
  // The rows X' the error uses: 512 evenly spaced of the n.
  const int64_t m = OutputError::kErrorRows;
  int same = 0, near_ties = 0;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> w(static_cast<size_t>(in));
    for (double& v : w) v = static_cast<float>(nd(rng));
    std::vector<double> D(static_cast<size_t>(candidates * in)), got(candidates), want(candidates);
    double absmax = 0;
    for (double v : w) absmax = std::max(absmax, std::fabs(v));
    for (int64_t c = 0; c < candidates; ++c) {
      const double s = absmax * (1.0 - 0.02 * static_cast<double>(c)) / 7;
      for (int64_t i = 0; i < in; ++i)
        D[c * in + i] = w[i] - s * std::clamp(std::nearbyint(w[i] / s), -8.0, 7.0);
    }
    err.errors(D.data(), candidates, got.data());
    for (int64_t c = 0; c < candidates; ++c) {
      double sum = 0;
      for (int64_t k = 0; k < m; ++k) {
        const int64_t t = (k * n) / m;
        double y = 0;
        for (int64_t i = 0; i < in; ++i) y += x[t * in + i] * D[c * in + i];
        sum += y * y;
      }
      want[c] = sum;
      EXPECT_NEAR(got[c], want[c], 1e-5 * want[c]) << "row " << r << " candidate " << c;
    }
    const auto best = [](const std::vector<double>& e) {
      return std::min_element(e.begin(), e.end()) - e.begin();
    };
    const int64_t bg = best(got), bw = best(want);
    if (bg == bw) {
      ++same;
    } else {
      ++near_ties;
      EXPECT_LT(std::fabs(want[bg] - want[bw]), 2e-5 * want[bw]) << "row " << r;
    }
  }
  EXPECT_GE(same, rows - 2);
}

}  // namespace
}  // namespace qbc::quant::f32_detail
