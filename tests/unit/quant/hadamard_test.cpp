// Tests of the Hadamard constructions (qbc/quant/hadamard.h): H·Hᵀ = n·I exactly for
// every size the rotation passes meet, the Paley and Goethals-Seidel bases, errors for
// orders qbc cannot build, random Hadamard rotations, and the fast transform against the
// dense product.
//
// How H·Hᵀ = n·I is checked (exact integer arithmetic throughout):
//   * n ≤ kFullCheckMax (4096): every row pair, on rows packed as bits
//     (⟨a, b⟩ = n − 2·popcount(a ⊕ b)).
//   * larger n: H_n is compared entry by entry with H_A ⊗ H_B (A·B = n, both ≤ 4096 and
//     fully checked; a Kronecker product of Hadamard matrices is Hadamard), and 256
//     random row pairs of H_n are multiplied directly in int32.
#include "qbc/quant/hadamard.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "qbc/frontend/hparams.h"
#include "qbc/support/random.h"
#include "test_support.h"

namespace qbc::quant {
namespace {

constexpr int64_t kFullCheckMax = 4096;

/// A size the rotation passes must support, and where it comes from.
struct SizeCase {
  int64_t n;
  const char* source;
};

// hidden = hidden_size (R1), head = head_dim or hidden/heads (R2, R3), ffn =
// intermediate_size (R4), from shared/model-configs/<name>/config.json unless noted.
const SizeCase kSizes[] = {
    {64, "stories260K hidden; head of Llama-3.2-1B, Qwen2.5-0.5B (896/14), SmolLM2-135M"},
    {128, "head of Llama-3.1-8B, Llama-3.2-3B, Mistral-7B, Qwen2.5-1.5B/3B/7B, Qwen3-*"},
    {256, "head of gemma-2-2b"},
    {172, "ffn of stories260K (shared/models/stories260k)"},
    {576, "hidden of SmolLM2-135M"},
    {896, "hidden of Qwen2.5-0.5B"},
    {1024, "hidden of Qwen3-0.6B"},
    {1536, "hidden of Qwen2.5-1.5B; ffn of SmolLM2-135M"},
    {2048, "hidden of Llama-3.2-1B, Qwen2.5-3B, Qwen3-1.7B"},
    {2304, "hidden of gemma-2-2b"},
    {2560, "hidden of Qwen3-4B"},
    {3072, "hidden of Llama-3.2-3B; ffn of Qwen3-0.6B"},
    {3584, "hidden of Qwen2.5-7B"},
    {4096, "hidden of Llama-3.1-8B, Mistral-7B"},
    {4864, "ffn of Qwen2.5-0.5B"},
    {5632, "ffn of TinyLlama-1.1B (research table; no config here)"},
    {6144, "ffn of Qwen3-1.7B"},
    {8192, "ffn of Llama-3.2-1B, Llama-3.2-3B"},
    {8960, "ffn of Qwen2.5-1.5B"},
    {9216, "ffn of gemma-2-2b"},
    {9728, "ffn of Qwen3-4B"},
    {11008, "ffn of Qwen2.5-3B (and Llama-2-7B)"},
    {14336, "ffn of Llama-3.1-8B, Mistral-7B"},
    {18944, "ffn of Qwen2.5-7B"},
};

/// popcount(a ⊕ b) over `words` words. Portable SWAR (baseline x86-64 has no popcnt
/// instruction): per-byte counts of up to 16 words are summed before one horizontal add.
int64_t count_differing_bits(const uint64_t* a, const uint64_t* b, int64_t words) {
  int64_t total = 0;
  for (int64_t w0 = 0; w0 < words; w0 += 16) {
    const int64_t w1 = std::min(words, w0 + 16);
    uint64_t bytes = 0;  // eight byte counters, each at most 16·8 = 128
    for (int64_t w = w0; w < w1; ++w) {
      uint64_t x = a[w] ^ b[w];
      x = x - ((x >> 1) & 0x5555555555555555ULL);
      x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
      bytes += (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
    }
    bytes = (bytes & 0x00ff00ff00ff00ffULL) + ((bytes >> 8) & 0x00ff00ff00ff00ffULL);
    total += static_cast<int64_t>((bytes * 0x0001000100010001ULL) >> 48);
  }
  return total;
}

/// Exact check of H·Hᵀ = n·I over all row pairs.
::testing::AssertionResult is_hadamard_full(const std::vector<int8_t>& h, int64_t n) {
  if (static_cast<int64_t>(h.size()) != n * n) {
    return ::testing::AssertionFailure() << "size " << h.size() << " != " << n << "²";
  }
  const int64_t words = (n + 63) / 64;
  std::vector<uint64_t> bits(static_cast<size_t>(n * words), 0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const int8_t v = h[static_cast<size_t>(i * n + j)];
      if (v != 1 && v != -1) {
        return ::testing::AssertionFailure() << "entry (" << i << ", " << j << ") = " << int{v};
      }
      if (v < 0) bits[static_cast<size_t>(i * words + j / 64)] |= uint64_t{1} << (j % 64);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t* a = bits.data() + i * words;
    for (int64_t k = i + 1; k < n; ++k) {
      const int64_t differ = count_differing_bits(a, bits.data() + k * words, words);
      if (n - 2 * differ != 0) {
        return ::testing::AssertionFailure()
               << "rows " << i << " and " << k << " have dot product " << n - 2 * differ;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

/// Exact check of `pairs` random row pairs (and those rows' norms) in int32.
::testing::AssertionResult is_hadamard_sampled(const std::vector<int8_t>& h, int64_t n, int pairs) {
  uint64_t state = 12345;
  for (int t = 0; t < pairs; ++t) {
    const int64_t i = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(n));
    const int64_t k = static_cast<int64_t>(splitmix64(state) % static_cast<uint64_t>(n));
    const int8_t* a = h.data() + i * n;
    const int8_t* b = h.data() + k * n;
    int32_t dot = 0;
    for (int64_t j = 0; j < n; ++j) dot += int32_t{a[j]} * int32_t{b[j]};
    if (dot != (i == k ? n : 0)) {
      return ::testing::AssertionFailure() << "rows " << i << " and " << k << ": dot " << dot;
    }
  }
  return ::testing::AssertionSuccess();
}

/// H_n == H_A ⊗ H_B entry by entry (A index major).
::testing::AssertionResult is_kronecker(const std::vector<int8_t>& h, int64_t n,
                                        const std::vector<int8_t>& ha, int64_t a,
                                        const std::vector<int8_t>& hb, int64_t b) {
  for (int64_t i = 0; i < n; ++i) {
    const int8_t* row = h.data() + i * n;
    const int8_t* arow = ha.data() + (i / b) * a;
    const int8_t* brow = hb.data() + (i % b) * b;
    for (int64_t ja = 0; ja < a; ++ja) {
      const int8_t* block = row + ja * b;
      bool same = true;
      for (int64_t jb = 0; jb < b; ++jb) same &= block[jb] == arow[ja] * brow[jb];
      if (!same) {
        return ::testing::AssertionFailure() << "H_" << n << " differs from H_" << a << " ⊗ H_" << b
                                             << " in row " << i << ", block " << ja;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

/// The largest power of two B dividing plan.pow2 with B ≤ kFullCheckMax and n/B ≤ kFullCheckMax.
int64_t split_for_check(const HadamardPlan& plan) {
  for (int64_t b = plan.pow2; b >= 1; b /= 2) {
    if (b <= kFullCheckMax && plan.n / b <= kFullCheckMax) return b;
  }
  return 0;
}

double elapsed_s(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

TEST(HadamardTest, SmallOrders) {
  QBC_ASSERT_OK(hadamard_matrix(1));
  EXPECT_EQ(*hadamard_matrix(1), std::vector<int8_t>({1}));
  QBC_ASSERT_OK(hadamard_matrix(2));
  EXPECT_EQ(*hadamard_matrix(2), std::vector<int8_t>({1, 1, 1, -1}));
  for (int64_t n : {4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48}) {
    auto h = hadamard_matrix(n);
    QBC_ASSERT_OK(h);
    EXPECT_TRUE(is_hadamard_full(*h, n)) << "n = " << n;
  }
}

TEST(HadamardTest, EverySizeOfTheModelsIsHadamard) {
  for (const SizeCase& c : kSizes) {
    SCOPED_TRACE(::testing::Message() << "n = " << c.n << " (" << c.source << ")");
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(hadamard_supported(c.n));
    auto plan = hadamard_plan(c.n);
    QBC_ASSERT_OK(plan);
    EXPECT_EQ(plan->base * plan->pow2, c.n);
    auto h = hadamard_matrix(c.n);
    QBC_ASSERT_OK(h);
    const char* how = "full";
    if (c.n <= kFullCheckMax) {
      EXPECT_TRUE(is_hadamard_full(*h, c.n));
    } else {
      how = "kronecker+sampled";
      const int64_t b = split_for_check(*plan);
      ASSERT_GT(b, 0);
      const int64_t a = c.n / b;
      auto ha = hadamard_matrix(a);
      auto hb = hadamard_matrix(b);
      QBC_ASSERT_OK(ha);
      QBC_ASSERT_OK(hb);
      EXPECT_TRUE(is_hadamard_full(*ha, a));
      EXPECT_TRUE(is_hadamard_full(*hb, b));
      EXPECT_TRUE(is_kronecker(*h, c.n, *ha, a, *hb, b));
      EXPECT_TRUE(is_hadamard_sampled(*h, c.n, 256));
    }
    std::printf("  %-58s %-18s %.2fs  <- %s\n", describe(*plan).c_str(), how, elapsed_s(start),
                c.source);
  }
}

// Every hidden_size, head_dim and intermediate_size of the configs in shared/ is in kSizes
// (so the test above covers it) and is supported.
TEST(HadamardTest, ModelConfigSizesAreListed) {
  QBC_REQUIRE_SHARED(configs, "model-configs");
  std::set<int64_t> listed;
  for (const SizeCase& c : kSizes) listed.insert(c.n);
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(configs)) {
    if (e.path().filename() == "config.json") files.push_back(e.path());
  }
  const std::filesystem::path models = testing::shared_dir() / "models";
  if (std::filesystem::exists(models)) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(models)) {
      if (e.path().filename() == "config.json") files.push_back(e.path());
    }
  }
  ASSERT_GE(files.size(), 13u);
  for (const auto& f : files) {
    auto hp = frontend::load_hparams(f);
    QBC_ASSERT_OK(hp);
    const std::map<std::string, int64_t> sizes = {{"hidden_size", hp->hidden_size},
                                                  {"head_dim", hp->head_dim},
                                                  {"intermediate_size", hp->intermediate_size}};
    for (const auto& [key, n] : sizes) {
      EXPECT_TRUE(hadamard_supported(n)) << f << ": " << key << " = " << n;
      // Tiny test models have power-of-two sizes below 64; they need no listing.
      if (n >= 64) {
        EXPECT_TRUE(listed.count(n)) << f << ": " << key << " = " << n << " not in kSizes";
      }
    }
  }
}

TEST(HadamardTest, PlansUseTheSmallestBase) {
  struct Want {
    int64_t n, base;
    HadamardBase construction;
    int64_t q;
  };
  const Want wants[] = {
      {8192, 1, HadamardBase::kNone, 0},           {1536, 12, HadamardBase::kPaleyI, 11},
      {2560, 20, HadamardBase::kPaleyI, 19},       {5632, 44, HadamardBase::kPaleyI, 43},
      {8960, 140, HadamardBase::kPaleyI, 139},     {14336, 28, HadamardBase::kPaleyII, 13},
      {9216, 36, HadamardBase::kPaleyII, 17},      {4864, 76, HadamardBase::kPaleyII, 37},
      {18944, 148, HadamardBase::kPaleyII, 73},    {11008, 172, HadamardBase::kGoethalsSeidel, 43},
      {52, 52, HadamardBase::kGoethalsSeidel, 13}, {156, 156, HadamardBase::kGoethalsSeidel, 39},
      {108, 108, HadamardBase::kPaleyI, 107},      {104, 52, HadamardBase::kGoethalsSeidel, 13},
  };
  for (const Want& w : wants) {
    auto plan = hadamard_plan(w.n);
    QBC_ASSERT_OK(plan);
    EXPECT_EQ(plan->base, w.base) << describe(*plan);
    EXPECT_EQ(plan->pow2, w.n / w.base) << describe(*plan);
    EXPECT_EQ(plan->construction, w.construction) << describe(*plan);
    EXPECT_EQ(plan->q, w.q) << describe(*plan);
  }
  EXPECT_EQ(describe(*hadamard_plan(11008)),
            "11008 = 172 (Goethals-Seidel, circulants of order 43) x 64 (Sylvester)");
}

TEST(HadamardTest, BaseConstructions) {
  // Paley I (q ≡ 3 mod 4), Paley II (q ≡ 1 mod 4), Goethals-Seidel.
  for (int64_t n : {12, 20, 44, 60, 68, 84, 108, 140, 28, 36, 76, 148, 52, 156, 172}) {
    auto h = hadamard_matrix(n);
    QBC_ASSERT_OK(h);
    EXPECT_TRUE(is_hadamard_full(*h, n)) << describe(*hadamard_plan(n));
    EXPECT_EQ(hadamard_plan(n)->base, n);
  }
  // Paley I bases are skew (H + Hᵀ = 2I), hence not symmetric: inverse is Hᵀ/n.
  auto h = *hadamard_matrix(12);
  for (int i = 0; i < 12; ++i) {
    for (int j = 0; j < 12; ++j) {
      EXPECT_EQ(h[i * 12 + j] + h[j * 12 + i], i == j ? 2 : 0);
    }
  }
}

TEST(HadamardTest, UnsupportedOrdersNameTheSize) {
  for (int64_t n : {int64_t{0}, int64_t{-4}, int64_t{3}, int64_t{6}, int64_t{10}, int64_t{14},
                    int64_t{92}, int64_t{100}, int64_t{184}, 2 * kMaxHadamardOrder}) {
    SCOPED_TRACE(::testing::Message() << "n = " << n);
    EXPECT_FALSE(hadamard_supported(n));
    auto plan = hadamard_plan(n);
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), Code::kInvalidArgument);
    EXPECT_TRUE(testing::contains(plan.status().message(), std::to_string(n)))
        << plan.status().message();
    auto h = hadamard_matrix(n);
    ASSERT_FALSE(h.ok());
    EXPECT_EQ(h.status().code(), Code::kInvalidArgument);
    EXPECT_FALSE(random_hadamard(n, 1).ok());
    double x[8] = {};
    EXPECT_FALSE(hadamard_transform(x, n, 0).ok());
  }
  // A multiple of 4 without a construction lists the forms qbc builds.
  const std::string msg = hadamard_plan(92).status().message();
  EXPECT_TRUE(testing::contains(msg, "no Hadamard matrix of order 92")) << msg;
  EXPECT_TRUE(testing::contains(msg, "Paley I")) << msg;
  EXPECT_TRUE(testing::contains(msg, "Paley II")) << msg;
  EXPECT_TRUE(testing::contains(msg, "52 156 172")) << msg;
  // Not a Hadamard order at all.
  EXPECT_TRUE(testing::contains(hadamard_plan(6).status().message(), "multiples of 4"));
  // Too large for a dense matrix, refused before allocating.
  auto big = hadamard_matrix(int64_t{1} << 16);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), Code::kResourceExhausted);
  EXPECT_TRUE(testing::contains(big.status().message(), "65536")) << big.status().message();
  EXPECT_TRUE(hadamard_supported(int64_t{1} << 16));
}

TEST(HadamardTest, RandomHadamardIsOrthogonalAndSeeded) {
  for (int64_t n : {1, 2, 12, 64, 172, 896}) {
    SCOPED_TRACE(::testing::Message() << "n = " << n);
    auto q = random_hadamard(n, 7);
    QBC_ASSERT_OK(q);
    double worst = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = i; k < n; ++k) {
        double dot = 0.0;
        for (int64_t j = 0; j < n; ++j) dot += (*q)[i * n + j] * (*q)[k * n + j];
        worst = std::max(worst, std::abs(dot - (i == k ? 1.0 : 0.0)));
      }
    }
    EXPECT_LE(worst, 1e-12);
    // Q = H · diag(s) / √n.
    const auto h = *hadamard_matrix(n);
    const auto s = hadamard_signs(n, 7);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_EQ((*q)[i * n + j], h[i * n + j] * s[j] / std::sqrt(static_cast<double>(n)));
      }
    }
  }
  // Deterministic for a seed, different across seeds.
  EXPECT_EQ(*random_hadamard(172, 7), *random_hadamard(172, 7));
  EXPECT_NE(*random_hadamard(172, 7), *random_hadamard(172, 8));
  EXPECT_EQ(hadamard_signs(4096, 99), hadamard_signs(4096, 99));
  EXPECT_NE(hadamard_signs(4096, 99), hadamard_signs(4096, 100));
  // Pinned: the signs are part of a compiled model's reproducibility.
  EXPECT_EQ(hadamard_signs(16, 0),
            std::vector<int8_t>({-1, 1, 1, -1, 1, 1, 1, -1, 1, -1, 1, -1, -1, -1, -1, -1}));
  const auto many = hadamard_signs(10000, 3);
  int64_t minus = 0;
  for (int8_t v : many) minus += v < 0;
  EXPECT_GT(minus, 4800);
  EXPECT_LT(minus, 5200);
  EXPECT_TRUE(hadamard_signs(0, 1).empty());
}

std::vector<double> random_vectors(int64_t n, int64_t count, uint64_t seed) {
  std::vector<double> x(static_cast<size_t>(n * count));
  for (double& v : x) v = 2.0 * uniform01(seed) - 1.0;
  return x;
}

/// y = H x / √n (or Hᵀ x / √n) for each vector, from the dense matrix.
std::vector<double> dense_apply(const std::vector<int8_t>& h, int64_t n,
                                const std::vector<double>& x, int64_t count, bool transpose) {
  std::vector<double> y(x.size(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(n));
  for (int64_t c = 0; c < count; ++c) {
    const double* xc = x.data() + c * n;
    double* yc = y.data() + c * n;
    for (int64_t r = 0; r < n; ++r) {
      const int8_t* hrow = h.data() + r * n;
      if (transpose) {  // y += x_r · (row r of H), i.e. y = Hᵀx
        for (int64_t i = 0; i < n; ++i) yc[i] += hrow[i] * xc[r];
      } else {
        double acc = 0.0;
        for (int64_t j = 0; j < n; ++j) acc += hrow[j] * xc[j];
        yc[r] = acc;
      }
    }
    for (int64_t i = 0; i < n; ++i) yc[i] *= scale;
  }
  return y;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

TEST(HadamardTest, FastTransformEqualsDenseProduct) {
  for (int64_t n : {1, 2, 4, 12, 28, 52, 64, 156, 172, 344, 896, 1536, 4864, 11008}) {
    SCOPED_TRACE(::testing::Message() << describe(*hadamard_plan(n)));
    const int64_t count = 3;
    const auto h = *hadamard_matrix(n);
    const std::vector<double> x = random_vectors(n, count, static_cast<uint64_t>(n));
    for (bool transpose : {false, true}) {
      std::vector<double> y = x;
      QBC_ASSERT_OK(hadamard_transform(y.data(), n, count, transpose));
      EXPECT_LE(max_abs_diff(y, dense_apply(h, n, x, count, transpose)), 1e-12)
          << "transpose = " << transpose;
      // The float version agrees to float rounding.
      std::vector<float> yf(x.begin(), x.end());
      QBC_ASSERT_OK(hadamard_transform(yf.data(), n, count, transpose));
      EXPECT_LE(max_abs_diff(std::vector<double>(yf.begin(), yf.end()), y), 1e-5);
    }
    // transpose = true inverts transpose = false.
    std::vector<double> y = x;
    QBC_ASSERT_OK(hadamard_transform(y.data(), n, count, false));
    QBC_ASSERT_OK(hadamard_transform(y.data(), n, count, true));
    EXPECT_LE(max_abs_diff(y, x), 1e-12);
  }
}

TEST(HadamardTest, RandomHadamardThroughTheTransform) {
  const int64_t n = 172;
  const auto q = *random_hadamard(n, 11);
  const auto s = hadamard_signs(n, 11);
  std::vector<double> x = random_vectors(n, 1, 5);
  std::vector<double> want(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) want[i] += q[i * n + j] * x[j];
  }
  for (int64_t j = 0; j < n; ++j) x[j] *= s[j];
  QBC_ASSERT_OK(hadamard_transform(x.data(), n, 1, false));
  EXPECT_LE(max_abs_diff(x, want), 1e-12);
}

TEST(HadamardTest, TransformCounts) {
  double x[4] = {1, 2, 3, 4};
  QBC_ASSERT_OK(hadamard_transform(x, 4, 0));
  EXPECT_EQ(x[0], 1.0);
  const Status negative = hadamard_transform(x, 4, -1);
  EXPECT_EQ(negative.code(), Code::kInvalidArgument);
  EXPECT_TRUE(testing::contains(negative.message(), "-1")) << negative.message();
  // H_4 (1, 2, 3, 4) / 2 = (5, −1, −2, 0).
  QBC_ASSERT_OK(hadamard_transform(x, 4, 1));
  EXPECT_EQ(std::vector<double>(x, x + 4), std::vector<double>({5, -1, -2, 0}));
}

}  // namespace
}  // namespace qbc::quant
