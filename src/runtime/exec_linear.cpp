// The MAC array's instructions: quantize (fp16 rows to integer codes with per-row scales and
// zero points), matmul (exact integer sums per weight group) and requant (the fp32
// multiply-adds of numerics::qlinear, in its order). Together they compute
// numerics::qlinear bit for bit, however the program tiles rows, channels and K.
#include <algorithm>
#include <vector>

#include "core.h"
#include "matmul_kernel.h"
#include "qbc/numerics/quantizer.h"
#include "thread_pool.h"
#include "values.h"

namespace qbc::runtime {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// The weight codes of rows [n, kt] as int8 (int4 unpacked, sign-extended); `w` points at
/// device memory, `scratch` holds the unpacked copy when needed.
const int8_t* weights_i8(const uint8_t* w, isa::DType t, int64_t n, int64_t kt,
                         std::vector<int8_t>* scratch) {
  if (t == isa::DType::kI8) return reinterpret_cast<const int8_t*>(w);
  const int64_t row_bytes = isa::dtype_bytes(t, kt);
  scratch->resize(static_cast<size_t>(n * kt));
  std::vector<int32_t> row(static_cast<size_t>(kt));
  for (int64_t j = 0; j < n; ++j) {
    load_codes(w + j * row_bytes, t, kt, row.data());
    for (int64_t k = 0; k < kt; ++k)
      (*scratch)[static_cast<size_t>(j * kt + k)] =
          static_cast<int8_t>(row[static_cast<size_t>(k)]);
  }
  return scratch->data();
}

/// The exact sums Σ (x − xz)(w − wz) per (m, j, g) of an int8-activation matmul, through
/// the int32 dot-product kernel; channel blocks run on the host threads.
void matmul_i8(const isa::MatMul& op, const int8_t* x, const int32_t* xz, const int8_t* w,
               const int32_t* wz, int64_t rows, int64_t gt, int64_t group, ThreadPool& pool,
               int64_t* out) {
  const int64_t n = op.n, kt = op.kt;
  std::vector<int16_t> xs(static_cast<size_t>(rows * kt));  // x − xz, |.| <= 255
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t k = 0; k < kt; ++k)
      xs[static_cast<size_t>(m * kt + k)] = static_cast<int16_t>(x[m * op.ldx + k] - xz[m]);
  }
  // Σ_k (x − xz) per (m, g), for the weight zero points: Σ (x − xz)(w − wz) = Σ (x − xz) w −
  // wz Σ (x − xz).
  std::vector<int64_t> xsum;
  if (wz != nullptr) {
    xsum.assign(static_cast<size_t>(rows * gt), 0);
    for (int64_t m = 0; m < rows; ++m) {
      for (int64_t k = 0; k < kt; ++k)
        xsum[static_cast<size_t>(m * gt + k / group)] += xs[static_cast<size_t>(m * kt + k)];
    }
  }
  // Channel blocks: big enough to keep a thread busy, small enough to spread.
  const int64_t work = rows * n * kt;
  const int64_t blocks =
      work < (int64_t{1} << 20) ? 1 : std::min<int64_t>(ceil_div(n, 16), 4 * pool.threads());
  const int64_t per = ceil_div(n, blocks);
  pool.parallel_for(blocks, [&](int64_t b) {
    const int64_t j0 = b * per, j1 = std::min(n, j0 + per);
    if (j0 >= j1) return;
    std::vector<int32_t> dots(static_cast<size_t>(rows * (j1 - j0)));
    for (int64_t g = 0; g < gt; ++g) {
      const int64_t k0 = g * group, len = std::min(group, kt - k0);
      dot_tile(xs.data() + k0, kt, rows, w + j0 * kt + k0, kt, j1 - j0, len, dots.data(), j1 - j0,
               1);
      for (int64_t m = 0; m < rows; ++m) {
        for (int64_t j = j0; j < j1; ++j) {
          int64_t v = dots[static_cast<size_t>(m * (j1 - j0) + j - j0)];
          if (wz != nullptr) v -= int64_t{wz[j * gt + g]} * xsum[static_cast<size_t>(m * gt + g)];
          out[(m * n + j) * gt + g] = v;
        }
      }
    }
  });
}

/// The same sums for any code types in plain int64 loops (int16 activations, long K).
void matmul_generic(const isa::MatMul& op, const uint8_t* x, const int32_t* xz, const int8_t* w,
                    const int32_t* wz, int64_t rows, int64_t gt, int64_t group, int64_t* out) {
  const int64_t n = op.n, kt = op.kt;
  std::vector<int32_t> xr(static_cast<size_t>(kt));
  const int64_t xb = op.xtype == isa::DType::kI16 ? 2 : 1;
  for (int64_t m = 0; m < rows; ++m) {
    load_codes(x + m * op.ldx * xb, op.xtype, kt, xr.data());
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t g = 0; g < gt; ++g) {
        const int64_t k0 = g * group, k1 = std::min(kt, k0 + group);
        const int64_t zw = wz != nullptr ? wz[j * gt + g] : 0;
        int64_t s = 0;
        for (int64_t k = k0; k < k1; ++k)
          s += (int64_t{xr[static_cast<size_t>(k)]} - xz[m]) * (int64_t{w[j * kt + k]} - zw);
        out[(m * n + j) * gt + g] = s;
      }
    }
  }
}

}  // namespace

Status exec_quantize(const isa::Quantize& op, Core& c) {
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const int64_t k = op.k;
  const isa::DType ct = op.bits == 16 ? isa::DType::kI16 : isa::DType::kI8;
  const int64_t cb = op.bits == 16 ? 2 : 1;
  QBC_ASSIGN_OR_RETURN(const uint8_t* x, c.sram_at(op.x, rows * 2 * k, "x"));
  QBC_ASSIGN_OR_RETURN(uint8_t * codes, c.sram_at(op.codes, rows * cb * k, "codes"));
  QBC_ASSIGN_OR_RETURN(uint8_t * scale, c.sram_at(op.scale, rows * 4, "scale"));
  QBC_ASSIGN_OR_RETURN(uint8_t * zero, c.sram_opt(op.zero, rows * 4, "zero"));
  std::vector<float> xr(static_cast<size_t>(k));
  std::vector<int32_t> q(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    load_f16(x + r * 2 * k, k, xr.data());
    float s = op.static_scale;
    int32_t z = 0;
    bool affine = false;
    switch (op.mode) {
      case isa::QuantMode::kTokenAffine:
        numerics::per_token_affine(xr.data(), k, op.bits, &s, &z);
        affine = true;
        break;
      case isa::QuantMode::kTokenSymmetric:
        s = numerics::per_token_scale(xr.data(), k, op.bits);
        break;
      case isa::QuantMode::kStaticAffine:
        z = op.static_zero;
        affine = true;
        break;
      case isa::QuantMode::kStaticSymmetric:
        break;
    }
    for (int64_t i = 0; i < k; ++i) {
      const double v = xr[static_cast<size_t>(i)];
      q[static_cast<size_t>(i)] = affine ? numerics::quantize_affine(v, s, z, op.bits)
                                         : numerics::quantize_symmetric(v, s, op.bits);
    }
    store_codes(q.data(), ct, k, codes + r * cb * k);
    store(&s, 1, scale + 4 * r);
    if (zero != nullptr) store(&z, 1, zero + 4 * r);
  }
  c.counters.vector_ops += rows * k;
  return ok_status();
}

Status exec_matmul(const isa::MatMul& op, Core& c) {
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const int64_t n = op.n, kt = op.kt;
  const int64_t group = op.group > 0 ? op.group : std::max<int64_t>(kt, 1);
  const int64_t gt = op.group > 0 ? ceil_div(kt, op.group) : 1;
  const int64_t xb = op.xtype == isa::DType::kI16 ? 2 : 1;
  const int64_t accb = op.acctype == isa::DType::kI32 ? 4 : 8;
  const int64_t x_bytes = rows == 0 ? 0 : ((rows - 1) * op.ldx + kt) * xb;
  QBC_ASSIGN_OR_RETURN(const uint8_t* x, c.sram_at(op.x, x_bytes, "x"));
  QBC_ASSIGN_OR_RETURN(const uint8_t* xzp, c.sram_opt(op.xzero, rows * 4, "xzero"));
  QBC_ASSIGN_OR_RETURN(const uint8_t* wp, c.sram_at(op.w, n * isa::dtype_bytes(op.wtype, kt), "w"));
  QBC_ASSIGN_OR_RETURN(const uint8_t* wzp, c.sram_opt(op.wzero, n * gt * 4, "wzero"));
  QBC_ASSIGN_OR_RETURN(uint8_t * acc, c.sram_at(op.acc, rows * n * gt * accb, "acc"));
  c.counters.macs += rows * n * kt;
  if (rows == 0 || n == 0) return ok_status();

  std::vector<int32_t> xz(static_cast<size_t>(rows), 0), wz;
  if (xzp != nullptr) load(xzp, rows, xz.data());
  if (wzp != nullptr) {
    wz.resize(static_cast<size_t>(n * gt));
    load(wzp, n * gt, wz.data());
  }
  std::vector<int8_t> unpacked;
  const int8_t* w = weights_i8(wp, op.wtype, n, kt, &unpacked);
  std::vector<int64_t> sums(static_cast<size_t>(rows * n * gt));
  const bool small_zero =
      std::all_of(xz.begin(), xz.end(), [](int32_t z) { return z >= -128 && z <= 127; });
  if (op.xtype == isa::DType::kI8 && small_zero && group <= kMaxExactDotLen) {
    matmul_i8(op, reinterpret_cast<const int8_t*>(x), xz.data(), w, wzp ? wz.data() : nullptr, rows,
              gt, group, c.pool, sums.data());
  } else {
    matmul_generic(op, x, xz.data(), w, wzp ? wz.data() : nullptr, rows, gt, group, sums.data());
  }
  const int64_t count = rows * n * gt;
  if (op.acctype == isa::DType::kI32) {
    std::vector<int32_t> a(static_cast<size_t>(count), 0);
    if (op.accumulate) load(acc, count, a.data());
    for (int64_t i = 0; i < count; ++i) {
      const int64_t v = int64_t{a[static_cast<size_t>(i)]} + sums[static_cast<size_t>(i)];
      a[static_cast<size_t>(i)] =
          static_cast<int32_t>(static_cast<uint32_t>(v));  // wraps like int32 hardware
    }
    store(a.data(), count, acc);
  } else {
    if (op.accumulate) {
      std::vector<int64_t> a(static_cast<size_t>(count));
      load(acc, count, a.data());
      for (int64_t i = 0; i < count; ++i) sums[static_cast<size_t>(i)] += a[static_cast<size_t>(i)];
    }
    store(sums.data(), count, acc);
  }
  return ok_status();
}

Status exec_requant(const isa::Requant& op, Core& c) {
  QBC_ASSIGN_OR_RETURN(const int64_t rows, c.count(op.rows, "rows"));
  const int64_t n = op.n, gt = op.gt;
  const int64_t accb = op.acctype == isa::DType::kI32 ? 4 : 8;
  const int64_t yb = op.ytype == isa::DType::kF16 ? 2 : 4;
  QBC_ASSIGN_OR_RETURN(const uint8_t* accp, c.sram_at(op.acc, rows * n * gt * accb, "acc"));
  QBC_ASSIGN_OR_RETURN(const uint8_t* xsp, c.sram_at(op.xscale, rows * 4, "xscale"));
  QBC_ASSIGN_OR_RETURN(
      const uint8_t* wsp,
      c.sram_at(op.wscale, n == 0 ? 0 : ((n - 1) * op.ws_stride + gt) * 4, "wscale"));
  uint8_t* fsp = nullptr;
  if (!op.first || !op.last) {
    QBC_ASSIGN_OR_RETURN(fsp, c.sram_at(op.fsum, rows * n * 4, "fsum"));
  }
  const uint8_t* biasp = nullptr;
  uint8_t* yp = nullptr;
  if (op.last) {
    QBC_ASSIGN_OR_RETURN(biasp, c.sram_opt(op.bias, n * 4, "bias"));
    QBC_ASSIGN_OR_RETURN(yp, c.sram_at(op.y, rows == 0 ? 0 : ((rows - 1) * op.ldy + n) * yb, "y"));
  }
  c.counters.vector_ops += rows * n * gt;
  if (rows == 0 || n == 0) return ok_status();
  const int64_t count = rows * n * gt;
  std::vector<int64_t> acc(static_cast<size_t>(count));
  if (op.acctype == isa::DType::kI32) {
    std::vector<int32_t> a(static_cast<size_t>(count));
    load(accp, count, a.data());
    std::copy(a.begin(), a.end(), acc.begin());
  } else {
    load(accp, count, acc.data());
  }
  std::vector<float> xs(static_cast<size_t>(rows)),
      ws(static_cast<size_t>((n - 1) * op.ws_stride + gt));
  load(xsp, rows, xs.data());
  load(wsp, static_cast<int64_t>(ws.size()), ws.data());
  std::vector<float> bias, fsum(static_cast<size_t>(rows * n)), row(static_cast<size_t>(n));
  if (biasp != nullptr) {
    bias.resize(static_cast<size_t>(n));
    load(biasp, n, bias.data());
  }
  if (!op.first) load(fsp, rows * n, fsum.data());
  for (int64_t m = 0; m < rows; ++m) {
    for (int64_t j = 0; j < n; ++j) {
      // numerics::qlinear's order: part_g = fp32(acc) * fp32(xs * ws), v = part_0 or
      // fsum + part_0, then + part_1 ..., + bias, one rounding.
      float v = fsum[static_cast<size_t>(m * n + j)];
      for (int64_t g = 0; g < gt; ++g) {
        const float mult =
            xs[static_cast<size_t>(m)] * ws[static_cast<size_t>(j * op.ws_stride + g)];
        const float part =
            static_cast<float>(acc[static_cast<size_t>((m * n + j) * gt + g)]) * mult;
        v = (op.first && g == 0) ? part : v + part;
      }
      if (op.last && biasp != nullptr) v = v + bias[static_cast<size_t>(j)];
      row[static_cast<size_t>(j)] = v;
    }
    if (!op.last) {
      store(row.data(), n, fsp + m * n * 4);
    } else if (op.ytype == isa::DType::kF16) {
      store_f16(row.data(), n, yp + m * op.ldy * 2);
    } else {
      store(row.data(), n, yp + m * op.ldy * 4);
    }
  }
  return ok_status();
}

}  // namespace qbc::runtime
