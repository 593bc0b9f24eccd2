// gemm_acc (src/quant/gptq_linalg.h), the fp64 product under GPTQ and the float target:
// every kernel (AVX-512, the AVX2 clone, the portable clone) gives, bit for bit, the sums of
// a plain loop that adds each output's terms one at a time in increasing k, a multiply then
// an add. ctest runs this file twice: as the host dispatches, and with QBC_GPTQ_NO_AVX512
// (the AVX2 or portable clone on an AVX-512 host).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gptq_linalg.h"

namespace qbc::quant::gptq_detail {
namespace {

struct Shape {
  int64_t m, n, k;
};

// Row blocks of every height (kMr 4 and the 1-3 row tails), packed and unpacked panels
// (more than 2 kMr rows), odd 8-column strips, ragged column edges, column and k panels
// past 256, and strided operands.
const Shape kShapes[] = {{1, 1, 1},    {3, 7, 5},     {4, 8, 16},  {5, 17, 9},     {9, 16, 33},
                         {13, 40, 70}, {12, 24, 300}, {2, 300, 3}, {17, 263, 257}, {8, 1, 600}};

TEST(GemmAcc, EveryKernelAddsEachTermInOrder) {
  std::mt19937 rng(5);
  std::normal_distribution<double> nd(0.0, 1.0);
  for (const Shape& s : kShapes) {
    const int64_t lda = s.k + 3, ldb = s.n + 5, ldc = s.n + 2;
    std::vector<double> A(static_cast<size_t>(s.m * lda)), B(static_cast<size_t>(s.k * ldb));
    std::vector<double> C(static_cast<size_t>(s.m * ldc));
    for (double& v : A) v = nd(rng);
    for (double& v : B) v = nd(rng);
    for (double& v : C) v = nd(rng);
    std::vector<double> want = C;
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        volatile double acc = want[i * ldc + j];  // volatile: one rounded add per term
        for (int64_t k = 0; k < s.k; ++k) {
          const volatile double p = A[i * lda + k] * B[k * ldb + j];
          acc = acc + p;
        }
        want[i * ldc + j] = acc;
      }
    }
    std::vector<double> got = C;
    gemm_acc(s.m, s.n, s.k, A.data(), lda, B.data(), ldb, got.data(), ldc);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(double)), 0)
        << s.m << " x " << s.n << " x " << s.k;
  }
}

TEST(GemmAcc, EmptyProductsLeaveCAlone) {
  std::vector<double> C = {1.5, -2.0}, A = {3.0}, B = {4.0};
  gemm_acc(0, 2, 1, A.data(), 1, B.data(), 2, C.data(), 2);
  gemm_acc(1, 2, 0, A.data(), 1, B.data(), 2, C.data(), 2);
  EXPECT_EQ(C, (std::vector<double>{1.5, -2.0}));
  gemm_acc(1, 1, 1, A.data(), 1, B.data(), 1, C.data(), 2);
  EXPECT_EQ(C, (std::vector<double>{13.5, -2.0}));
}

}  // namespace
}  // namespace qbc::quant::gptq_detail
