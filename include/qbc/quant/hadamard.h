// Hadamard matrices for the rotation passes (SpinR1, SpinR2, R3, R4; see
// shared/docs/research/quant.md §3.2-3.6): construction of ±1 matrices with
// H·Hᵀ = n·I, seeded random Hadamard rotations, and a fast in-place transform.
//
// Every supported order is n = base · pow2 with
//   H_n = H_base ⊗ H_pow2     (Kronecker product, base index major),
// i.e. H_n[k·pow2 + j][k'·pow2 + j'] = H_base[k][k'] · H_pow2[j][j'], where
//   * H_pow2 is Sylvester's matrix, H_pow2[j][j'] = (−1)^popcount(j & j') (symmetric);
//   * H_base is 1 (n a power of two), or one of
//       - Paley I, order q+1 for a prime q ≡ 3 (mod 4): 12, 20, 44, 60, 108, 140, ...
//       - Paley II, order 2(q+1) for a prime q ≡ 1 (mod 4): 28, 36, 76, 148, ...
//       - Goethals–Seidel from four ±1 circulants of order q = base/4: 52, 156, 172.
//     The smallest base that works is used (it is the dense part of the fast
//     transform); when both Paley constructions give it, Paley I is used.
// This is QuaRot's `matmul_hadU` layout: a vector of length n viewed as a
// [base, pow2] row-major matrix X is mapped to H_base · X · H_pow2.
// Paley I bases are not symmetric, so H_n is in general not symmetric: its
// inverse is H_nᵀ/n, not H_n/n.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "qbc/support/status.h"

namespace qbc::quant {

/// Which construction gives the base factor H_base of a Hadamard order.
enum class HadamardBase {
  kNone,            ///< base = 1: n is a power of two (pure Sylvester).
  kPaleyI,          ///< base = q + 1, q prime, q ≡ 3 (mod 4).
  kPaleyII,         ///< base = 2(q + 1), q prime, q ≡ 1 (mod 4).
  kGoethalsSeidel,  ///< base = 4q from four ±1 circulants of order q (q = 13, 39, 43).
};

/// How a supported order n is built: n = base · pow2, H_n = H_base ⊗ H_pow2.
struct HadamardPlan {
  int64_t n = 1;     ///< The order.
  int64_t base = 1;  ///< Order of the non-Sylvester factor (1 when n is a power of two).
  int64_t pow2 = 1;  ///< Order of the Sylvester factor, a power of two.
  HadamardBase construction = HadamardBase::kNone;
  int64_t q = 0;  ///< Paley's prime, or the circulant order of Goethals–Seidel; 0 for kNone.
};

/// Largest order hadamard_plan() accepts (the transform needs n doubles per vector).
inline constexpr int64_t kMaxHadamardOrder = int64_t{1} << 30;
/// Largest order the dense builders (hadamard_matrix, random_hadamard) accept:
/// they allocate n² entries.
inline constexpr int64_t kMaxDenseHadamardOrder = int64_t{1} << 15;

/// The construction of order `n`. kInvalidArgument naming `n` and listing the
/// supported forms when qbc cannot build it (n ≤ 0, n not 1, 2 or a multiple of
/// 4, no supported base, or n > kMaxHadamardOrder).
StatusOr<HadamardPlan> hadamard_plan(int64_t n);

/// True iff hadamard_plan(n) succeeds.
bool hadamard_supported(int64_t n);

/// One line describing `plan`, e.g. "11008 = 172 (Goethals-Seidel, circulants of
/// order 43) x 64 (Sylvester)"; for logs, reports and test output.
std::string describe(const HadamardPlan& plan);

/// The n×n ±1 Hadamard matrix H_n of the header comment, row-major
/// (entry (i, j) at [i·n + j]), with H_n·H_nᵀ = n·I. Errors: those of
/// hadamard_plan(), and kResourceExhausted when n > kMaxDenseHadamardOrder.
StatusOr<std::vector<int8_t>> hadamard_matrix(int64_t n);

/// n random signs s ∈ {+1, −1}ⁿ from splitmix64 seeded with `seed`: s_j is −1
/// iff the top bit of the (j+1)-th output is set. The same on every machine.
/// Empty when n ≤ 0.
std::vector<int8_t> hadamard_signs(int64_t n, uint64_t seed);

/// The random Hadamard rotation Q = H_n · diag(s) / √n with s = hadamard_signs(n, seed),
/// row-major doubles: Q[i·n + j] = H_n[i][j] · s_j / √n. Q is orthogonal (Q·Qᵀ = I).
/// To apply Q to a vector without the dense matrix: x ← s ⊙ x, then
/// hadamard_transform(x, n, 1, /*transpose=*/false). Errors as hadamard_matrix().
StatusOr<std::vector<double>> random_hadamard(int64_t n, uint64_t seed);

/// Applies the orthogonal H_n/√n in place to `count` contiguous vectors of length
/// n starting at `x` (vector c is x[c·n .. c·n + n − 1]):
///   transpose = false:  x ← H_n  · x / √n,   i.e. y_i = Σ_j H_n[i][j] · x_j / √n;
///   transpose = true:   x ← H_nᵀ · x / √n,   the inverse of the above.
/// Seen as a row-major [count, n] matrix X, that is X ← X·H_nᵀ/√n (false) or
/// X ← X·H_n/√n (true). Cost per vector: a Sylvester butterfly on each of the
/// `base` rows of the [base, pow2] view, O(n log pow2), then a dense H_base
/// multiply from the left, O(n · base). Equals the dense product with
/// hadamard_matrix(n)/√n up to rounding. Errors: those of hadamard_plan(), and
/// kInvalidArgument for count < 0. No work and OK for count == 0.
Status hadamard_transform(double* x, int64_t n, int64_t count, bool transpose = false);

/// The float version: each vector is transformed in double and rounded once.
Status hadamard_transform(float* x, int64_t n, int64_t count, bool transpose = false);

}  // namespace qbc::quant
