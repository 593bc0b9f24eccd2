// Hadamard matrices: Sylvester, Paley I/II and Goethals–Seidel bases, their
// Kronecker products with Sylvester matrices, and the fast transform. The
// layout convention (base index major) is documented in qbc/quant/hadamard.h.
#include "qbc/quant/hadamard.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <sstream>
#include <utility>

#include "qbc/support/random.h"

namespace qbc::quant {
namespace {

bool is_prime(int64_t q) {
  if (q < 2) return false;
  for (int64_t d = 2; d * d <= q; ++d) {
    if (q % d == 0) return false;
  }
  return true;
}

/// Four ±1 circulants A, B, C, D of order q with AAᵀ + BBᵀ + CCᵀ + DDᵀ = 4q·I,
/// given as the positions of their −1 entries in the first row: the union of
/// the orbits r·⟨multiplier⟩ (mod q) over the listed representatives r.
///
/// They were found for this file by an exhaustive search over unions of such
/// orbits (the periodic autocorrelation is constant on each orbit, so the search
/// is over a few thousand sets per circulant); the unit test verifies the
/// resulting matrices. For q = 43 the multiplier group {±1, ±6, ±7} contains −1,
/// so those circulants are symmetric, i.e. Williamson matrices.
struct CirculantQuad {
  int64_t q;
  int64_t multiplier;
  std::array<std::vector<int64_t>, 4> reps;
};

const std::vector<CirculantQuad>& circulant_quads() {
  static const std::vector<CirculantQuad> quads = {
      {13, 3, {{{1}, {1, 2}, {1, 2}, {1, 4}}}},
      {39, 31, {{{0, 1, 2, 3, 4}, {0, 1, 2, 5, 6}, {0, 1, 4, 5, 12}, {1, 3, 4, 5, 6, 17}}}},
      {43, 7, {{{1, 2, 3}, {0, 1, 3, 4, 5}, {2, 3, 4, 9}, {3, 5, 9}}}},
  };
  return quads;
}

const CirculantQuad* find_quad(int64_t q) {
  for (const CirculantQuad& quad : circulant_quads()) {
    if (quad.q == q) return &quad;
  }
  return nullptr;
}

/// The construction of a base order k > 1, or kNone when there is none.
std::pair<HadamardBase, int64_t> base_construction(int64_t k) {
  if (k % 4 != 0) return {HadamardBase::kNone, 0};
  if (is_prime(k - 1)) return {HadamardBase::kPaleyI, k - 1};  // k − 1 ≡ 3 (mod 4)
  if (k % 8 == 4 && is_prime(k / 2 - 1)) return {HadamardBase::kPaleyII, k / 2 - 1};
  if (find_quad(k / 4) != nullptr) return {HadamardBase::kGoethalsSeidel, k / 4};
  return {HadamardBase::kNone, 0};
}

std::string supported_forms() {
  std::ostringstream os;
  os << "qbc builds orders 2^k·K (H_K ⊗ Sylvester) with K = 1; K = q+1 for a prime q ≡ 3 "
        "(mod 4) (Paley I: 12, 20, 44, 60, ...); K = 2(q+1) for a prime q ≡ 1 (mod 4) "
        "(Paley II: 28, 36, 76, 148, ...); or K = 4q from Goethals-Seidel circulants (K =";
  for (const CirculantQuad& quad : circulant_quads()) os << ' ' << 4 * quad.q;
  os << ")";
  return os.str();
}

/// χ(x) for x in [0, q): 0, +1 for a nonzero square mod q, −1 otherwise.
std::vector<int8_t> legendre_table(int64_t q) {
  std::vector<int8_t> chi(static_cast<size_t>(q), -1);
  chi[0] = 0;
  for (int64_t x = 1; x < q; ++x) chi[static_cast<size_t>(x * x % q)] = 1;
  return chi;
}

/// Paley I, order q+1: H = I + S with S = [[0, 1ᵀ], [−1, Q]], Q_ij = χ(j − i).
std::vector<int8_t> paley1(int64_t q) {
  const std::vector<int8_t> chi = legendre_table(q);
  const int64_t k = q + 1;
  std::vector<int8_t> h(static_cast<size_t>(k * k));
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      int8_t s;
      if (i == 0) {
        s = j == 0 ? 0 : 1;
      } else if (j == 0) {
        s = -1;
      } else {
        s = chi[static_cast<size_t>(((j - i) % q + q) % q)];
      }
      h[static_cast<size_t>(i * k + j)] = static_cast<int8_t>(s + (i == j ? 1 : 0));
    }
  }
  return h;
}

/// Paley II, order 2(q+1): H = C ⊗ [[1, 1], [1, −1]] + I ⊗ [[1, −1], [−1, −1]] with
/// the symmetric conference matrix C = [[0, 1ᵀ], [1, Q]], Q_ij = χ(j − i).
std::vector<int8_t> paley2(int64_t q) {
  const std::vector<int8_t> chi = legendre_table(q);
  const int64_t c = q + 1;
  const int64_t k = 2 * c;
  auto conference = [&](int64_t a, int64_t b) -> int {
    if (a == 0 || b == 0) return a == b ? 0 : 1;
    return chi[static_cast<size_t>(((b - a) % q + q) % q)];
  };
  static constexpr int kPlus[2][2] = {{1, 1}, {1, -1}};
  static constexpr int kDiag[2][2] = {{1, -1}, {-1, -1}};
  std::vector<int8_t> h(static_cast<size_t>(k * k));
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t a = i / 2, b = j / 2;
      const int bi = static_cast<int>(i % 2), bj = static_cast<int>(j % 2);
      const int v = conference(a, b) * kPlus[bi][bj] + (a == b ? kDiag[bi][bj] : 0);
      h[static_cast<size_t>(i * k + j)] = static_cast<int8_t>(v);
    }
  }
  return h;
}

/// Goethals–Seidel array (1967), order 4q, with R the back-diagonal permutation:
///   [  A    BR    CR    DR  ]
///   [ −BR   A    DᵀR  −CᵀR  ]
///   [ −CR  −DᵀR   A    BᵀR  ]
///   [ −DR   CᵀR  −BᵀR   A   ]
/// For a circulant X with first row x: X_ij = x[j − i], (XR)_ij = x[−i − j − 1] and
/// (XᵀR)_ij = x[i + j + 1], indices mod q.
std::vector<int8_t> goethals_seidel(const CirculantQuad& quad) {
  const int64_t q = quad.q;
  std::array<std::vector<int8_t>, 4> rows;
  for (int t = 0; t < 4; ++t) {
    rows[t].assign(static_cast<size_t>(q), 1);
    for (int64_t r : quad.reps[t]) {
      int64_t x = r;
      do {
        rows[t][static_cast<size_t>(x)] = -1;
        x = x * quad.multiplier % q;
      } while (x != r);
    }
  }
  enum Form { kCirc, kTimesR, kTransposeTimesR };
  struct Block {
    int seq;  // 0..3 = A..D
    Form form;
    int sign;
  };
  static constexpr Block kArray[4][4] = {
      {{0, kCirc, 1}, {1, kTimesR, 1}, {2, kTimesR, 1}, {3, kTimesR, 1}},
      {{1, kTimesR, -1}, {0, kCirc, 1}, {3, kTransposeTimesR, 1}, {2, kTransposeTimesR, -1}},
      {{2, kTimesR, -1}, {3, kTransposeTimesR, -1}, {0, kCirc, 1}, {1, kTransposeTimesR, 1}},
      {{3, kTimesR, -1}, {2, kTransposeTimesR, 1}, {1, kTransposeTimesR, -1}, {0, kCirc, 1}},
  };
  const int64_t k = 4 * q;
  std::vector<int8_t> h(static_cast<size_t>(k * k));
  for (int bi = 0; bi < 4; ++bi) {
    for (int bj = 0; bj < 4; ++bj) {
      const Block& blk = kArray[bi][bj];
      const std::vector<int8_t>& x = rows[blk.seq];
      for (int64_t i = 0; i < q; ++i) {
        for (int64_t j = 0; j < q; ++j) {
          int64_t idx = 0;
          switch (blk.form) {
            case kCirc:
              idx = j - i;
              break;
            case kTimesR:
              idx = -i - j - 1;
              break;
            case kTransposeTimesR:
              idx = i + j + 1;
              break;
          }
          idx = ((idx % q) + q) % q;
          h[static_cast<size_t>((bi * q + i) * k + bj * q + j)] =
              static_cast<int8_t>(blk.sign * x[static_cast<size_t>(idx)]);
        }
      }
    }
  }
  return h;
}

/// H_base of `plan`, base×base row-major ([1] for kNone).
std::vector<int8_t> base_matrix(const HadamardPlan& plan) {
  switch (plan.construction) {
    case HadamardBase::kNone:
      return {1};
    case HadamardBase::kPaleyI:
      return paley1(plan.q);
    case HadamardBase::kPaleyII:
      return paley2(plan.q);
    case HadamardBase::kGoethalsSeidel:
      return goethals_seidel(*find_quad(plan.q));
  }
  return {1};
}

/// Unnormalized in-place Sylvester transform of length p (a power of two): x ← H_p x.
void fwht(double* x, int64_t p) {
  for (int64_t len = 1; len < p; len <<= 1) {
    for (int64_t i = 0; i < p; i += 2 * len) {
      for (int64_t j = i; j < i + len; ++j) {
        const double a = x[j];
        const double b = x[j + len];
        x[j] = a + b;
        x[j + len] = a - b;
      }
    }
  }
}

/// A prepared transform: the plan and H_base (or H_baseᵀ), reused over vectors.
class Transform {
 public:
  Transform(const HadamardPlan& plan, bool transpose)
      : plan_(plan), h_(base_matrix(plan)), scale_(1.0 / std::sqrt(static_cast<double>(plan.n))) {
    if (transpose) {
      const int64_t k = plan_.base;
      for (int64_t i = 0; i < k; ++i) {
        for (int64_t j = i + 1; j < k; ++j) {
          std::swap(h_[static_cast<size_t>(i * k + j)], h_[static_cast<size_t>(j * k + i)]);
        }
      }
    }
    if (plan_.base > 1) tmp_.resize(static_cast<size_t>(plan_.n));
  }

  /// x ← H x / √n (H_base already transposed when asked).
  void apply(double* x) {
    const int64_t k = plan_.base, p = plan_.pow2;
    for (int64_t r = 0; r < k; ++r) fwht(x + r * p, p);
    if (k > 1) {
      std::fill(tmp_.begin(), tmp_.end(), 0.0);
      for (int64_t r = 0; r < k; ++r) {
        double* out = tmp_.data() + r * p;
        const int8_t* hrow = h_.data() + r * k;
        for (int64_t c = 0; c < k; ++c) {
          const double* in = x + c * p;
          if (hrow[c] > 0) {
            for (int64_t j = 0; j < p; ++j) out[j] += in[j];
          } else {
            for (int64_t j = 0; j < p; ++j) out[j] -= in[j];
          }
        }
      }
      std::copy(tmp_.begin(), tmp_.end(), x);
    }
    for (int64_t i = 0; i < plan_.n; ++i) x[i] *= scale_;
  }

 private:
  HadamardPlan plan_;
  std::vector<int8_t> h_;
  double scale_;
  std::vector<double> tmp_;
};

Status check_dense(int64_t n) {
  if (n > kMaxDenseHadamardOrder) {
    return resource_exhausted("dense Hadamard matrix of order ", n, " would have ", n,
                              "² entries; the limit is order ", kMaxDenseHadamardOrder,
                              " (use hadamard_transform instead)");
  }
  return ok_status();
}

}  // namespace

StatusOr<HadamardPlan> hadamard_plan(int64_t n) {
  if (n <= 0) return invalid_argument("Hadamard order must be positive, got ", n);
  if (n > kMaxHadamardOrder) {
    return invalid_argument("Hadamard order ", n, " exceeds the limit ", kMaxHadamardOrder);
  }
  HadamardPlan plan;
  plan.n = n;
  int64_t odd = n;
  int64_t pow2 = 1;
  while (odd % 2 == 0) {
    odd /= 2;
    pow2 *= 2;
  }
  if (odd == 1) {
    plan.pow2 = n;
    return plan;
  }
  if (n % 4 != 0) {
    return invalid_argument("no Hadamard matrix of order ", n,
                            ": Hadamard orders are 1, 2 and multiples of 4");
  }
  // Smallest base first: it is the dense factor of the transform.
  for (int64_t base = odd; base <= n; base *= 2) {
    const auto [construction, q] = base_construction(base);
    if (construction == HadamardBase::kNone) continue;
    plan.base = base;
    plan.pow2 = n / base;
    plan.construction = construction;
    plan.q = q;
    return plan;
  }
  return invalid_argument("no Hadamard matrix of order ", n, " = ", odd, "·", pow2,
                          " is implemented: no base K = ", odd, "·2^a (K dividing ", n,
                          ") has a construction; ", supported_forms());
}

bool hadamard_supported(int64_t n) { return hadamard_plan(n).ok(); }

std::string describe(const HadamardPlan& plan) {
  std::ostringstream os;
  os << plan.n << " = ";
  switch (plan.construction) {
    case HadamardBase::kNone:
      break;
    case HadamardBase::kPaleyI:
      os << plan.base << " (Paley I, q=" << plan.q << ") x ";
      break;
    case HadamardBase::kPaleyII:
      os << plan.base << " (Paley II, q=" << plan.q << ") x ";
      break;
    case HadamardBase::kGoethalsSeidel:
      os << plan.base << " (Goethals-Seidel, circulants of order " << plan.q << ") x ";
      break;
  }
  os << plan.pow2 << " (Sylvester)";
  return os.str();
}

StatusOr<std::vector<int8_t>> hadamard_matrix(int64_t n) {
  QBC_ASSIGN_OR_RETURN(const HadamardPlan plan, hadamard_plan(n));
  QBC_RETURN_IF_ERROR(check_dense(n));
  const std::vector<int8_t> hb = base_matrix(plan);
  const int64_t k = plan.base, p = plan.pow2;
  std::vector<int8_t> h(static_cast<size_t>(n * n));
  std::vector<int8_t> sylvester_row(static_cast<size_t>(p));
  for (int64_t j = 0; j < p; ++j) {
    // Row j of Sylvester's H_p, (−1)^popcount(j & jj), built bit by bit of jj.
    sylvester_row[0] = 1;
    for (int64_t len = 1; len < p; len <<= 1) {
      const int8_t sign = (j & len) ? -1 : 1;
      for (int64_t t = 0; t < len; ++t) {
        sylvester_row[static_cast<size_t>(len + t)] =
            static_cast<int8_t>(sign * sylvester_row[static_cast<size_t>(t)]);
      }
    }
    for (int64_t r = 0; r < k; ++r) {
      int8_t* row = h.data() + (r * p + j) * n;
      for (int64_t c = 0; c < k; ++c) {
        const int8_t sign = hb[static_cast<size_t>(r * k + c)];
        int8_t* out = row + c * p;
        for (int64_t jj = 0; jj < p; ++jj) {
          out[jj] = static_cast<int8_t>(sign * sylvester_row[static_cast<size_t>(jj)]);
        }
      }
    }
  }
  return h;
}

std::vector<int8_t> hadamard_signs(int64_t n, uint64_t seed) {
  std::vector<int8_t> s(static_cast<size_t>(n > 0 ? n : 0));
  uint64_t state = seed;
  for (int8_t& v : s) v = (splitmix64(state) >> 63) ? -1 : 1;
  return s;
}

StatusOr<std::vector<double>> random_hadamard(int64_t n, uint64_t seed) {
  QBC_ASSIGN_OR_RETURN(const std::vector<int8_t> h, hadamard_matrix(n));
  const std::vector<int8_t> s = hadamard_signs(n, seed);
  const double scale = 1.0 / std::sqrt(static_cast<double>(n));
  std::vector<double> out(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const size_t at = static_cast<size_t>(i * n + j);
      out[at] = static_cast<double>(h[at] * s[static_cast<size_t>(j)]) * scale;
    }
  }
  return out;
}

Status hadamard_transform(double* x, int64_t n, int64_t count, bool transpose) {
  QBC_ASSIGN_OR_RETURN(const HadamardPlan plan, hadamard_plan(n));
  if (count < 0) return invalid_argument("Hadamard transform: negative vector count ", count);
  Transform t(plan, transpose);
  for (int64_t c = 0; c < count; ++c) t.apply(x + c * n);
  return ok_status();
}

Status hadamard_transform(float* x, int64_t n, int64_t count, bool transpose) {
  QBC_ASSIGN_OR_RETURN(const HadamardPlan plan, hadamard_plan(n));
  if (count < 0) return invalid_argument("Hadamard transform: negative vector count ", count);
  Transform t(plan, transpose);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t c = 0; c < count; ++c) {
    float* xc = x + c * n;
    std::copy(xc, xc + n, v.begin());
    t.apply(v.data());
    for (int64_t i = 0; i < n; ++i) xc[i] = static_cast<float>(v[static_cast<size_t>(i)]);
  }
  return ok_status();
}

}  // namespace qbc::quant
