// GPTQ for one linear layer, and Hessian accumulation (include/qbc/quant/gptq.h).
//
// Linear algebra, all fp64, in place in the Hessian's buffer with O(in) extra memory:
//   A = J P H Pᵀ J    act-order permutation P, then the reversal J (i -> n-1-i)
//   A + λI = L Lᵀ     blocked right-looking Cholesky, lower triangle only
//   M = L⁻¹           blocked lower-triangular inverse
//   U = J M J         reversing the flat buffer moves M to the upper triangle
// Then UᵀU = (P H Pᵀ + λI)⁻¹ with U upper and a positive diagonal, so U is the
// chol(H⁻¹, upper) of GPTQ, for 2n³/3 flops instead of the n³ of GPTQ's
// chol + cholesky_inverse + chol. The factorisation never writes the strict
// upper triangle, so a failed attempt is undone by copying it back.
//
// Every matrix product goes through gemm_acc(), which adds the terms of each
// output element to it one at a time, in increasing k order, without fused
// multiply-adds (qbc_quant builds with -ffp-contract=off). Splitting a product
// by rows, columns or k ranges, running it on any number of threads, or with
// any vector width (gemm_acc has an AVX2 clone) gives bit-identical results.
#include "qbc/quant/gptq.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <system_error>
#include <thread>
#include <utility>

#include "clip_power.h"
#include "gptq_linalg.h"
#include "qbc/numerics/quantizer.h"

namespace qbc::quant {
namespace {

using gptq_detail::Damping;
using gptq_detail::gemm_acc;
using gptq_detail::inverse_cholesky_upper;
using gptq_detail::kMr;
using gptq_detail::mirror_upper;
using gptq_detail::parallel_chunks;
using gptq_detail::permute_symmetric;
using gptq_detail::resolve_threads;

// ---------------------------------------------------------------------------
// Scales (docs/numerics.md, docs/research/quant.md §2.1 and §2.3).

/// The code of w: clamp(rne(w / s) + z, −qmax − 1, qmax).
double code_of(double w, double s, int qm, double z = 0) {
  return std::clamp(std::nearbyint(w / s) + z, static_cast<double>(-qm - 1),
                    static_cast<double>(qm));
}

/// Σ |s·(q(w) − z) − w|² over w[0, len), stopping early once it reaches `bound`.
double clip_error2(const double* w, int64_t len, double s, int qm, double bound, double z) {
  double sum = 0;
  for (int64_t j = 0; j < len; ++j) {
    const double d = std::fabs(s * (code_of(w[j], s, qm, z) - z) - w[j]);
    sum += d * d;
    if (sum >= bound) break;
  }
  return sum;
}

/// The first of the candidates (scale s[c], zero point z[c]) with the least
/// Σ |s·(q(w) − z) − w|^norm over w[0, len) (each sum in order from +0; norms other than 2
/// through clip_power, eight candidates at a time).
size_t best_candidate(const double* w, int64_t len, const std::vector<double>& s,
                      const std::vector<double>& z, int qm, double norm) {
  size_t best = 0;
  double best_err = std::numeric_limits<double>::infinity();
  if (norm == 2.0) {
    for (size_t c = 0; c < s.size(); ++c) {
      const double err = clip_error2(w, len, s[c], qm, best_err, z[c]);
      if (err < best_err) {
        best_err = err;
        best = c;
      }
    }
    return best;
  }
  double err[clip_detail::kBatch];
  for (size_t c0 = 0; c0 < s.size(); c0 += clip_detail::kBatch) {
    const int count = static_cast<int>(std::min<size_t>(clip_detail::kBatch, s.size() - c0));
    clip_detail::power_errors(w, len, s.data() + c0, z.data() + c0, count, qm, norm, best_err, err);
    for (int c = 0; c < count; ++c) {
      if (err[c] < best_err) {
        best_err = err[c];
        best = c0 + static_cast<size_t>(c);
      }
    }
  }
  return best;
}

/// The asymmetric parameters of w[0, len) (docs/numerics.md): the range [lo, hi] =
/// [min(min w, 0), max(max w, 0)] shrunk by p = 1 (p = 1, 1 − 1/grid, ... with
/// mse_clip), s = fp32(p·(hi − lo) / (2^b − 1)) (≥ 1e-8), z = clamp(rne(−p·lo / s), 0,
/// 2^b − 1) − 2^(b−1) in the signed code range (s rounded to fp16 first for 4-bit groups,
/// numerics::affine_params_fp16); the first with the least error wins.
numerics::AffineParams segment_affine(const double* w, int64_t len, int bits,
                                      const GptqOptions& o) {
  const int qm = static_cast<int>(numerics::quant_max(bits));
  double lo = 0, hi = 0;
  for (int64_t j = 0; j < len; ++j) {
    lo = std::min(lo, w[j]);
    hi = std::max(hi, w[j]);
  }
  const bool f16 = numerics::fp16_weight_scales(bits, o.group_size);
  if (hi - lo == 0)
    return f16 ? numerics::affine_params_fp16(0, 0, bits) : numerics::AffineParams{};
  const double norm = o.mse_clip ? o.mse_norm : 2.0;
  const int steps = o.mse_clip ? static_cast<int>(o.mse_max_shrink * o.mse_grid + 1e-9) : 1;
  thread_local std::vector<numerics::AffineParams> cand;
  thread_local std::vector<double> cs, cz;
  cand.clear();
  cs.clear();
  cz.clear();
  for (int i = 0; i < std::max(steps, 1); ++i) {
    const double p = 1.0 - static_cast<double>(i) / o.mse_grid;
    cand.push_back(f16 ? numerics::affine_params_fp16(p * (hi - lo), -p * lo, bits)
                       : numerics::affine_params(p * (hi - lo), -p * lo, bits));
    cs.push_back(cand.back().scale);
    cz.push_back(cand.back().zero);
  }
  return cand[best_candidate(w, len, cs, cz, qm, norm)];
}

/// The scale of the weights w[0, len) (docs/numerics.md): the candidates
/// extreme_scale(e, p, end) for both ends and p = 1 (p = 1, 1 − 1/grid, ... with
/// mse_clip), in that order; the first with the least Σ|ŵ − w|^norm wins (norm 2, or
/// mse_norm with mse_clip). The first candidate is the absmax rule. For 4-bit groups every
/// candidate is rounded to fp16 (numerics::fp16_weight_scale) before its error is measured.
float segment_scale(const double* w, int64_t len, int bits, const GptqOptions& o) {
  const int qm = static_cast<int>(numerics::quant_max(bits));
  const double e = extreme_weight(w, len);
  const bool f16 = numerics::fp16_weight_scales(bits, o.group_size);
  auto rounded = [f16](float s) { return f16 ? numerics::fp16_weight_scale(s) : s; };
  const float s0 = rounded(extreme_scale(e, 1.0, bits, ScaleEnd::kQmax));
  if (e == 0) return s0;
  const double norm = o.mse_clip ? o.mse_norm : 2.0;
  const int steps = o.mse_clip ? static_cast<int>(o.mse_max_shrink * o.mse_grid + 1e-9) : 1;
  thread_local std::vector<double> cs, cz;
  cs.clear();
  for (int i = 0; i < std::max(steps, 1); ++i) {
    const double p = 1.0 - static_cast<double>(i) / o.mse_grid;
    for (ScaleEnd end : {ScaleEnd::kQmax, ScaleEnd::kLongEnd})
      cs.push_back(rounded(extreme_scale(e, p, bits, end)));
  }
  cz.assign(cs.size(), 0.0);
  return static_cast<float>(cs[best_candidate(w, len, cs, cz, qm, norm)]);
}

/// The scales (and, when o.zero_point, zero points) of the groups of one row w[0, in).
void row_params(const double* w, int64_t in, const GptqOptions& o, float* scales, int8_t* zeros) {
  const int64_t gs = o.group_size > 0 ? o.group_size : in;
  for (int64_t g = 0, c0 = 0; c0 < in; ++g, c0 += gs) {
    const int64_t len = std::min(gs, in - c0);
    if (o.zero_point) {
      const numerics::AffineParams sz = segment_affine(w + c0, len, o.bits, o);
      scales[g] = sz.scale;
      zeros[g] = static_cast<int8_t>(sz.zero);
    } else {
      scales[g] = segment_scale(w + c0, len, o.bits, o);
    }
  }
}

/// Sizes r.scales (and r.zeros) to [out, groups].
void size_params(int64_t out, int64_t in, const GptqOptions& o, GptqResult& r) {
  const int64_t gs = o.group_size > 0 ? o.group_size : in;
  const int64_t groups = (in + gs - 1) / gs;
  r.scales.assign(static_cast<size_t>(out * groups), 0.0f);
  r.zeros.assign(o.zero_point ? static_cast<size_t>(out * groups) : 0, 0);
}

Status check_inputs(const std::vector<float>& W, int64_t out, int64_t in, const GptqOptions& o) {
  if (out <= 0 || in <= 0) return invalid_argument("weight shape [", out, ", ", in, "] is empty");
  if (static_cast<int64_t>(W.size()) != out * in) {
    return invalid_argument("weight has ", W.size(), " values, expected [", out, ", ", in,
                            "] = ", out * in);
  }
  if (o.bits < 2 || o.bits > 8) return invalid_argument("bits = ", o.bits, " (supported: 2..8)");
  if (o.group_size < 0) return invalid_argument("group_size = ", o.group_size, " is negative");
  if (o.refine_sweeps < 0)
    return invalid_argument("refine_sweeps = ", o.refine_sweeps, " is negative");
  if (o.mse_clip &&
      (!(o.mse_norm > 0) || o.mse_grid < 1 || !(o.mse_max_shrink >= 0) || o.mse_max_shrink >= 1)) {
    return invalid_argument(
        "MSE clip search: need mse_norm > 0, mse_grid >= 1 and "
        "mse_max_shrink in [0, 1)");
  }
  for (int64_t r = 0; r < out; ++r) {
    for (int64_t c = 0; c < in; ++c) {
      const float v = W[r * in + c];
      if (!std::isfinite(v)) {
        return invalid_argument("weight (", r, ", ", c, ") is not finite (", v, ")");
      }
    }
  }
  return ok_status();
}

GptqResult make_result(int64_t out, int64_t in, const GptqOptions& o) {
  GptqResult r;
  r.out = out;
  r.in = in;
  r.bits = o.bits;
  r.group_size = o.group_size;
  r.codes.assign(static_cast<size_t>(out * in), 0);
  return r;
}

constexpr int64_t kHessianTile = 256;  // calibration rows per rank-k update
constexpr int64_t kSweepRows = 128;    // output rows per GPTQ work item

/// Greedy coordinate descent on the codes of rows [a, b) of r (the refine_sweeps of
/// GptqOptions). A is H + λI [n, n] in the original column order. Per row, with
/// δ = w − ŵ (w the row of W, dead columns 0) and g = Aδ, a pass visits the columns
/// in order; column i moves its code by k = rne(g_i / (s·A_ii)) clamped to the code
/// range, which changes δᵀAδ by s·k·(s·k·A_ii − 2·g_i), and takes the move when that is
/// negative (g then loses s·k·A[i, :]). Returns the rows' Σ δᵀAδ (computed afresh from
/// the final codes) and adds the moved codes to *moved.
double refine_rows(const std::vector<float>& W, const std::vector<bool>& dead, const double* A,
                   int64_t n, int sweeps, int qm, GptqResult& r, int64_t a, int64_t b,
                   int64_t* moved) {
  const int64_t m = b - a;
  std::vector<double> d(static_cast<size_t>(m * n)), g;
  auto residual = [&] {
    for (int64_t row = a; row < b; ++row) {
      for (int64_t c = 0; c < n; ++c) {
        const double w = dead[c] ? 0.0 : static_cast<double>(W[row * n + c]);
        const double what =
            static_cast<double>(r.scale(row, c)) * (r.codes[row * n + c] - r.zero(row, c));
        d[(row - a) * n + c] = w - what;
      }
    }
    g.assign(static_cast<size_t>(m * n), 0.0);
    gemm_acc(m, n, n, d.data(), n, A, n, g.data(), n);
  };
  residual();
  int64_t count = 0;
  for (int64_t row = a; row < b; ++row) {
    double* __restrict dr = d.data() + (row - a) * n;
    double* __restrict gr = g.data() + (row - a) * n;
    int8_t* codes = r.codes.data() + row * n;
    for (int sweep = 0; sweep < sweeps; ++sweep) {
      bool changed = false;
      for (int64_t i = 0; i < n; ++i) {
        if (dead[i]) continue;
        const double s = r.scale(row, i), aii = A[i * n + i];
        const double want = std::nearbyint(gr[i] / (s * aii));
        const double to =
            std::clamp(codes[i] + want, static_cast<double>(-qm - 1), static_cast<double>(qm));
        const double k = to - codes[i];
        if (k == 0) continue;
        const double step = s * k;
        if (!(step * (step * aii - 2.0 * gr[i]) < 0)) continue;
        codes[i] = static_cast<int8_t>(to);
        dr[i] -= step;
        const double* __restrict ai = A + i * n;
        for (int64_t j = 0; j < n; ++j) gr[j] -= ai[j] * step;
        changed = true;
        ++count;
      }
      if (!changed) break;
    }
  }
  // The loss from the final codes, not from the updated g (which carries rounding).
  residual();
  double loss = 0;
  for (int64_t k = 0; k < m * n; ++k) loss += d[k] * g[k];
  *moved += count;
  return loss;
}

}  // namespace

// ---------------------------------------------------------------------------

double extreme_weight(const double* w, int64_t len) {
  double e = 0;
  for (int64_t j = 0; j < len; ++j) {
    if (std::fabs(w[j]) > std::fabs(e)) e = w[j];
  }
  return e;
}

float extreme_scale(double e, double p, int bits, ScaleEnd end) {
  const int levels =
      static_cast<int>(numerics::quant_max(bits)) + (end == ScaleEnd::kLongEnd ? 1 : 0);
  const float amax = static_cast<float>(std::fabs(e));
  const float mag = p == 1.0 ? amax / static_cast<float>(levels)
                             : static_cast<float>(p * static_cast<double>(amax) / levels);
  const float s = std::max(mag, 1e-8f);
  return end == ScaleEnd::kLongEnd && e > 0 ? -s : s;
}

float rtn_scale(const double* w, int64_t len, int bits) {
  GptqOptions o;
  o.bits = bits;
  return segment_scale(w, len, bits, o);
}

int64_t GptqResult::groups() const {
  return group_size > 0 ? (in + group_size - 1) / group_size : 1;
}

float GptqResult::scale(int64_t row, int64_t col) const {
  return scales[row * groups() + (group_size > 0 ? col / group_size : 0)];
}

int GptqResult::zero(int64_t row, int64_t col) const {
  return zeros.empty() ? 0 : zeros[row * groups() + (group_size > 0 ? col / group_size : 0)];
}

std::vector<float> dequantize(const GptqResult& r) {
  std::vector<float> w(r.codes.size());
  for (int64_t row = 0; row < r.out; ++row) {
    for (int64_t c = 0; c < r.in; ++c) {
      const int64_t k = row * r.in + c;
      w[k] =
          static_cast<float>(static_cast<double>(r.scale(row, c)) * (r.codes[k] - r.zero(row, c)));
    }
  }
  return w;
}

HessianAccumulator::HessianAccumulator(int64_t in, int num_threads)
    : in_(std::max<int64_t>(in, 0)),
      num_threads_(resolve_threads(num_threads)),
      sum_(static_cast<size_t>(in_ * in_), 0.0) {}

Status HessianAccumulator::add(const float* x, int64_t rows) {
  if (rows < 0) return invalid_argument("Hessian: negative row count ", rows);
  if (rows == 0) return ok_status();
  if (x == nullptr) return invalid_argument("Hessian: null calibration rows");
  const int64_t n = in_;
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(x[t * n + i])) {
        return invalid_argument("Hessian: calibration row ", samples_ + t, " feature ", i,
                                " is not finite (", x[t * n + i], ")");
      }
    }
  }
  std::vector<double> xd, xt;  // a tile of rows [kt, n] and its transpose [n, kt]
  for (int64_t t0 = 0; t0 < rows; t0 += kHessianTile) {
    const int64_t kt = std::min(kHessianTile, rows - t0);
    gptq_detail::load_tile(x, t0, kt, n, &xd, &xt);
    // S[i][j] += Σ_t x[t][i] · x[t][j] for j ≥ i, by chunks of rows i.
    double* S = sum_.data();
    parallel_chunks(n, 128, num_threads_, [&](int64_t a, int64_t b) {
      gemm_acc(b - a, n - b, kt, xt.data() + a * kt, kt, xd.data() + b, n, S + a * n + b, n);
      for (int64_t ib = a; ib < b; ib += kMr) {
        const int64_t mb = std::min(kMr, b - ib), jb = ib + mb;
        gemm_acc(mb, b - jb, kt, xt.data() + ib * kt, kt, xd.data() + jb, n, S + ib * n + jb, n);
        for (int64_t i = ib; i < jb; ++i) {
          gemm_acc(1, jb - i, kt, xt.data() + i * kt, kt, xd.data() + i, n, S + i * n + i, n);
        }
      }
    });
  }
  samples_ += rows;
  return ok_status();
}

StatusOr<std::vector<double>> HessianAccumulator::hessian() const {
  if (samples_ == 0) return failed_precondition("Hessian: no calibration rows were added");
  const int64_t n = in_;
  const double factor = 2.0 / static_cast<double>(samples_);
  std::vector<double> H(static_cast<size_t>(n * n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i; j < n; ++j) H[i * n + j] = sum_[i * n + j] * factor;
  }
  mirror_upper(H.data(), n);
  return H;
}

StatusOr<GptqResult> rtn_quantize(const std::vector<float>& W, int64_t out, int64_t in,
                                  const GptqOptions& options) {
  QBC_RETURN_IF_ERROR(check_inputs(W, out, in, options).with_context("rtn"));
  const int threads = resolve_threads(options.num_threads);
  GptqResult r = make_result(out, in, options);
  size_params(out, in, options, r);
  const int64_t groups = r.groups();
  const int qm = static_cast<int>(numerics::quant_max(options.bits));
  // Row by row through an fp64 copy of one row: no fp64 copy of the whole matrix (an
  // LM head can be gigabytes).
  parallel_chunks(out, 16, threads, [&](int64_t a, int64_t b) {
    std::vector<double> wd(static_cast<size_t>(in));
    for (int64_t row = a; row < b; ++row) {
      for (int64_t c = 0; c < in; ++c) wd[c] = W[row * in + c];
      row_params(wd.data(), in, options, r.scales.data() + row * groups,
                 options.zero_point ? r.zeros.data() + row * groups : nullptr);
      const int64_t gs = options.group_size > 0 ? options.group_size : in;
      for (int64_t g = 0, c0 = 0; c0 < in; ++g, c0 += gs) {
        const double sc = r.scales[row * groups + g];
        const double z = options.zero_point ? r.zeros[row * groups + g] : 0;
        for (int64_t c = c0; c < std::min(in, c0 + gs); ++c) {
          r.codes[row * in + c] = static_cast<int8_t>(code_of(wd[c], sc, qm, z));
        }
      }
    }
  });
  return r;
}

StatusOr<GptqFactor> gptq_factor(std::vector<double> H, const GptqOptions& o) {
  const int64_t n = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(H.size()))));
  if (n <= 0 || static_cast<int64_t>(H.size()) != n * n)
    return invalid_argument("gptq: Hessian of ", H.size(), " entries is not square");
  if (o.block_size < 1) return invalid_argument("gptq: block_size = ", o.block_size, " < 1");
  if (!(o.perc_damp > 0) || o.perc_damp > 1) {
    return invalid_argument("gptq: perc_damp = ", o.perc_damp, " is outside (0, 1]");
  }
  if (o.max_damp_retries < 0) return invalid_argument("gptq: max_damp_retries is negative");
  if (o.refine_sweeps < 0)
    return invalid_argument("gptq: refine_sweeps = ", o.refine_sweeps, " is negative");
  // Only the upper triangle is read: check it, then mirror it.
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i; j < n; ++j) {
      const double v = H[i * n + j];
      if (!std::isfinite(v)) {
        return invalid_argument("gptq: Hessian entry (", i, ", ", j, ") is not finite (", v, ")");
      }
    }
    if (H[i * n + i] < 0) {
      return invalid_argument("gptq: Hessian diagonal entry ", i, " is negative (", H[i * n + i],
                              "); a Hessian is a sum of x^T x");
    }
  }
  mirror_upper(H.data(), n);
  const int threads = resolve_threads(o.num_threads);
  GptqFactor f;
  f.n = n;
  // Dead columns: no calibration input ever reached them (their weights count as 0).
  f.dead.assign(static_cast<size_t>(n), false);
  for (int64_t i = 0; i < n; ++i) {
    if (H[i * n + i] != 0) continue;
    H[i * n + i] = 1;
    f.dead[i] = true;
  }
  f.perm.resize(static_cast<size_t>(n));
  std::iota(f.perm.begin(), f.perm.end(), 0);
  if (o.act_order) {
    std::stable_sort(f.perm.begin(), f.perm.end(),
                     [&](int64_t a, int64_t b) { return H[a * n + a] > H[b * n + b]; });
  }
  // refine_sweeps: H (mirrored, dead columns at 1) in the original order, + λI below.
  if (o.refine_sweeps > 0) f.A = H;
  std::vector<int64_t> q(f.perm.rbegin(), f.perm.rend());  // act order, reversed
  permute_symmetric(H, n, q, threads);
  QBC_ASSIGN_OR_RETURN(const Damping dmp, inverse_cholesky_upper(H, n, o, q, threads));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < i; ++j) H[i * n + j] = 0;  // the strict lower part was work space
  }
  f.U = std::move(H);
  f.lambda = dmp.lambda;
  f.fraction = dmp.fraction;
  f.retries = dmp.retries;
  for (int64_t i = 0; i < n && !f.A.empty(); ++i) f.A[i * n + i] += dmp.lambda;
  return f;
}

StatusOr<GptqResult> gptq_quantize(const std::vector<float>& W, int64_t out, int64_t in,
                                   std::vector<double> H, const GptqOptions& o) {
  QBC_RETURN_IF_ERROR(check_inputs(W, out, in, o).with_context("gptq"));
  if (static_cast<int64_t>(H.size()) != in * in) {
    return invalid_argument("gptq: Hessian has ", H.size(),
                            " entries, expected in x in = ", in * in);
  }
  QBC_ASSIGN_OR_RETURN(const GptqFactor f, gptq_factor(std::move(H), o));
  return gptq_quantize(W, out, in, f, o);
}

StatusOr<GptqResult> gptq_quantize(const std::vector<float>& W, int64_t out, int64_t in,
                                   const GptqFactor& f, const GptqOptions& o) {
  QBC_RETURN_IF_ERROR(check_inputs(W, out, in, o).with_context("gptq"));
  const int64_t n = in;
  if (f.n != n || static_cast<int64_t>(f.U.size()) != n * n ||
      static_cast<int64_t>(f.perm.size()) != n || static_cast<int64_t>(f.dead.size()) != n) {
    return invalid_argument("gptq: the factor is for ", f.n, " inputs, the weight has ", n);
  }
  if (o.block_size < 1) return invalid_argument("gptq: block_size = ", o.block_size, " < 1");
  if (o.refine_sweeps > 0 && static_cast<int64_t>(f.A.size()) != n * n)
    return invalid_argument("gptq: refine_sweeps needs a factor made with refine_sweeps");
  const int threads = resolve_threads(o.num_threads);
  GptqResult r = make_result(out, n, o);
  const std::vector<bool>& dead = f.dead;
  const std::vector<int64_t>& perm = f.perm;
  for (int64_t i = 0; i < n; ++i) r.dead_columns += dead[i] ? 1 : 0;
  // Scales from the original-order rows (one fp64 row at a time: no fp64 copy of the
  // whole matrix beside the act-order one; an LM head is gigabytes).
  size_params(out, n, o, r);
  {
    const int64_t groups = r.groups();
    parallel_chunks(out, 16, threads, [&](int64_t a, int64_t b) {
      std::vector<double> row(static_cast<size_t>(n));
      for (int64_t i = a; i < b; ++i) {
        for (int64_t c = 0; c < n; ++c) row[c] = dead[c] ? 0.0 : static_cast<double>(W[i * n + c]);
        row_params(row.data(), n, o, r.scales.data() + i * groups,
                   o.zero_point ? r.zeros.data() + i * groups : nullptr);
      }
    });
  }
  std::vector<double> wp(static_cast<size_t>(out * n));  // W in act order
  for (int64_t row = 0; row < out; ++row) {
    for (int64_t i = 0; i < n; ++i)
      wp[row * n + i] = dead[perm[i]] ? 0.0 : static_cast<double>(W[row * n + perm[i]]);
  }
  r.damp = f.lambda;
  r.damp_fraction = f.fraction;
  r.damp_retries = f.retries;

  // The sweep. Rows of W are independent given U: each work item owns a chunk of rows.
  const double* U = f.U.data();
  const int qm = static_cast<int>(numerics::quant_max(o.bits));
  const int64_t groups = r.groups();
  const int64_t bs = std::min(o.block_size, n);
  std::vector<double> row_loss(static_cast<size_t>(out), 0.0);
  parallel_chunks(out, kSweepRows, threads, [&](int64_t a, int64_t b) {
    std::vector<double> err_neg(static_cast<size_t>((b - a) * bs));
    for (int64_t i1 = 0; i1 < n; i1 += bs) {
      const int64_t i2 = std::min(i1 + bs, n), cnt = i2 - i1;
      for (int64_t row = a; row < b; ++row) {
        double* __restrict w = wp.data() + row * n;
        const float* s_row = r.scales.data() + row * groups;
        const int8_t* z_row = o.zero_point ? r.zeros.data() + row * groups : nullptr;
        double loss = row_loss[row];
        for (int64_t i = i1; i < i2; ++i) {
          const int64_t col = perm[i];
          const int64_t g = o.group_size > 0 ? col / o.group_size : 0;
          const double s = s_row[g];
          const double z = z_row != nullptr ? z_row[g] : 0;
          const double code = code_of(w[i], s, qm, z);
          r.codes[row * n + col] = static_cast<int8_t>(code);
          const double* __restrict u = U + i * n;
          const double e = (w[i] - s * (code - z)) / u[i];
          loss += e * e;
          for (int64_t j = i + 1; j < i2; ++j) w[j] -= e * u[j];
          err_neg[(row - a) * cnt + (i - i1)] = -e;
        }
        row_loss[row] = loss;
      }
      // Lazy batch update of the later columns: W[:, i2:] -= Err · U[i1:i2, i2:].
      gemm_acc(b - a, n - i2, cnt, err_neg.data(), cnt, U + i1 * n + i2, n, wp.data() + a * n + i2,
               n);
    }
  });
  double loss = 0;
  for (double l : row_loss) loss += l;
  r.proxy_loss = r.sweep_proxy_loss = 0.5 * loss;
  if (o.refine_sweeps > 0) {
    std::vector<double>().swap(wp);  // the act-order weights are no longer needed
    const std::vector<double>& A = f.A;
    const size_t chunks = static_cast<size_t>((out + kSweepRows - 1) / kSweepRows);
    std::vector<double> refined(chunks, 0.0);  // per work item, summed in row order below
    std::vector<int64_t> moved(chunks, 0);
    parallel_chunks(out, kSweepRows, threads, [&](int64_t a, int64_t b) {
      refined[a / kSweepRows] =
          refine_rows(W, dead, A.data(), n, o.refine_sweeps, qm, r, a, b, &moved[a / kSweepRows]);
    });
    double total = 0;
    for (double l : refined) total += l;
    r.proxy_loss = 0.5 * total;
    for (int64_t c : moved) r.refined_codes += c;
  }
  return r;
}

}  // namespace qbc::quant
