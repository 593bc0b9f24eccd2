// Private to src/quant: the error powers of GPTQ's MSE clip search (gptq.cpp's segment_scale
// and segment_affine): Σ |s·(q(w) − z) − w|^p over a group of weights, with p the search's
// norm (2.4 by default), eight candidate ranges at a time. std::pow per weight was about a
// sixth of a 4-bit GPTQ compile; here
// the power is exp2(p · log2 d) from a short series in plain additions, multiplications,
// one division and bit operations (qbc_quant builds with -ffp-contract=off), about 1e-13
// relative to the exact power, and the same bits from the AVX-512, AVX2 and portable
// kernels, so a compile's result does not depend on the CPU.
#pragma once

#include <cstdint>

namespace qbc::quant::clip_detail {

/// The kernels; kAuto takes the fastest the CPU has.
enum class Kernel { kAuto, kAvx512, kAvx2, kPortable };

/// Whether this CPU runs `k` (kPortable and kAuto always).
bool available(Kernel k);

/// d^p for d >= 0 and p > 0 (the scalar form of the kernels' power): +0 for d = 0, a
/// subnormal d, or a result below 2^-1022.5 (results just above may be subnormal); +inf
/// from about 2^1023.5.
double power(double d, double p);

/// Candidates measured together by power_errors().
inline constexpr int kBatch = 8;

/// For each candidate c < count (≤ kBatch) with scale s[c] and zero point z[c]:
/// out[c] = Σ_j |s_c·(code − z_c) − w_j|^p over w[0, len) in order from +0, code =
/// clamp(rne(w_j / s_c) + z_c, −qm − 1, qm): the sum a loop over power() gives, bit for bit.
/// Stops early once every candidate's sum has reached `bound`, leaving partial sums (each
/// ≥ bound), so a search that keeps the first candidate below its best so far picks what
/// full sums would pick.
void power_errors(const double* w, int64_t len, const double* s, const double* z, int count, int qm,
                  double p, double bound, double* out, Kernel kernel = Kernel::kAuto);

}  // namespace qbc::quant::clip_detail
